//! Follow-up jobs: the next job, sent if and only if this one commits (a
//! transactional outbox on SQS).
//!
//! A job often has to start another (charge → send the receipt; order →
//! reserve stock). Sent by the handler itself, the next job would go out
//! even when this job's commit then fails (rejected, a conflict, a crash),
//! or be lost when the process dies between the commit and the send. So a
//! handler adds it to its [`Effect`](crate::store::dynamodb::Effect) instead
//! ([`Effect::then_send`](crate::store::dynamodb::Effect::then_send)), and idemq:
//!
//! 1. **stores the follow-ups in the job's marker** (the separate marker
//!    item, or the [fused](crate::store::dynamodb::Effect::marked_by) one), in the same
//!    `TransactWriteItems` / `PutItem` as the effect: they exist exactly
//!    when the effect committed. No extra read or write.
//! 2. **sends them after the commit, before the acknowledgement**, with the
//!    [`Producer`](crate::producer::Producer) (each with its own
//!    `idemq-job-id`, on a FIFO queue a deduplication id derived from
//!    it). If a send fails, the job is *not* acknowledged: it stays on the
//!    queue and is retried.
//! 3. **re-sends them from the marker on a redelivery**: a redelivered job
//!    (after a crash between commit and send, or a failed send) finds its
//!    marker, which DynamoDB returns with the failed condition
//!    (`ReturnValuesOnConditionCheckFailure=ALL_OLD`: "the item attributes
//!    as they appeared before they were updated",
//!    <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_Put.html>;
//!    a transaction's reason carries it as `Item`,
//!    <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_CancellationReason.html>),
//!    or which idemq reads back when it was not returned. The follow-ups
//!    *stored* there are sent again, not the ones the handler returned this
//!    time, before the job is acknowledged as a duplicate, **only while the
//!    marker's commit is within the follow-up horizon**: the marker TTL
//!    less the replay window (1 day; 20 days with the default 21-day TTL).
//!    Each re-sent follow-up carries the parent's commit time as its
//!    `idemq-first-enqueued` attribute, so its consumer weighs its real
//!    age against its own markers' lifetime, not the re-sent copy's.
//!
//! A follow-up is thus sent **at least once**, and only if the job
//! committed: a rejected, conflicting or failed job sends none. Its stable
//! job id makes its own consumer apply it once (another idemq consumer, or
//! anything that deduplicates on `idemq-job-id`), for as long as that
//! consumer keeps its marker.
//!
//! # Why the re-send stops at the horizon
//!
//! A marker can make a job a duplicate long after its follow-ups' own
//! markers expired: a fused marker is the user's item and never expires,
//! and an expired separate marker is still read until DynamoDB's TTL
//! deletes it, up to 48 hours later. A producer that sends the same job id
//! again on day 30 then finds the marker, and re-sending the stored
//! follow-ups would apply them a second time. So past the horizon, or when
//! the marker has no commit time (a fused marker written by a version that
//! stored none), a duplicate does not re-send: it logs the job id, the
//! follow-ups' ids, the commit time and the horizon (never bodies), counts
//! them (`FollowUpsNotResent`, [`crate::metrics`]), and is acknowledged as
//! before.
//!
//! That loses nothing a correct run needs. Only a redelivery of the job's
//! own message needs the re-send (a crash between the commit and the send,
//! a failed send, a replay from the DLQ), and such a redelivery comes while
//! the message exists: within the source queue's retention and then the
//! DLQ's, both counted from its first enqueue, which is before the commit.
//! The start-up check makes the marker TTL at least source retention + DLQ
//! retention + the replay window, so the horizon is at least source + DLQ
//! retention: every such redelivery is within it. The window the horizon
//! leaves before the TTL is the re-sent child's own: sent just inside the
//! horizon, it still has a replay window to be consumed while markers
//! committed after its parent's live. A message that outlives that (a
//! replay processed more than a replay window after its DLQ retention
//! ended) is refused by its consumer as too old to deduplicate. The one
//! case left is a job committed by an earlier version whose follow-up was
//! not sent before the upgrade: it is logged, for an operator to send by
//! hand.
//!
//! Everything SQS and DynamoDB would refuse is checked before any I/O, by
//! [`Effect::validate`](crate::store::dynamodb::Effect::validate): a follow-up that SQS
//! refused *after* the commit could never be sent. The checks: a valid job
//! id, each job id once per effect, a non-empty body, at most
//! [`MAX_FOLLOW_UP_BYTES`] with its attributes, at most
//! [`MAX_ATTRIBUTES`] attributes with `idemq-job-id` and
//! `idemq-first-enqueued` (counted always, as a re-send carries it: at most
//! 8 of its own), no `idemq-` attribute of its own, a group on a queue
//! whose name ends in `.fifo` ("FIFO queue names must end with the .fifo
//! suffix", <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-fifo.html>),
//! and the marker item with its follow-ups within DynamoDB's 400 KB.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_sqs::types::MessageAttributeValue;
use serde::Serialize;

use crate::horizon::ReplayHorizon;
use crate::job::{IDEMQ_ATTRIBUTE_PREFIX, InvalidJobId, JobId};
use crate::producer::{Job, MAX_ATTRIBUTES, SendError, attributes_with_job_id};

mod sender;
#[cfg(test)]
mod tests;

pub(crate) use sender::{AfterCommit, FollowUpSender};

/// The marker attribute that stores a job's follow-ups (a list of maps).
/// A [fused](crate::store::dynamodb::Effect::marked_by) marker's item may not set it.
pub const FOLLOW_UPS_ATTRIBUTE: &str = "idemq_follow_ups";

/// The largest follow-up message (body plus attributes, as SQS counts
/// them): 256 KiB, the `MaximumMessageSize` default of queues created
/// before August 2025 (1 MiB since; "from 1,024 bytes (1 KiB) up to
/// 1,048,576 bytes (1 MiB)",
/// <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-messages.html>).
/// Checked before the commit, when the target queue's own limit is not
/// known yet: a queue configured below this can still refuse one, and the
/// job is then retried until its redrive gives up.
pub const MAX_FOLLOW_UP_BYTES: usize = 256 * 1024;

/// The first-enqueued time a follow-up's size is checked with: its value
/// (epoch milliseconds) has 13 digits until the year 2286, as this one's.
fn latest_first_enqueued() -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(9_999_999_999_999)
}

/// A job to send if and only if the effect that carries it commits.
///
/// ```
/// use idemq::followup::FollowUp;
/// let receipt = FollowUp::new(
///     "https://sqs.us-east-1.amazonaws.com/123456789012/receipts",
///     "order-7/receipt",
///     &serde_json::json!({"order": "order-7"}),
/// )
/// .unwrap()
/// .string_attribute("tenant", "acme");
/// let effect = idemq::store::dynamodb::Effect::new().then_send(receipt);
/// assert_eq!(effect.follow_ups()[0].job_id(), "order-7/receipt");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct FollowUp {
    queue_url: String,
    job_id: String,
    body: String,
    group_id: Option<String>,
    attributes: HashMap<String, MessageAttributeValue>,
}

/// Why a follow-up cannot be part of an effect (found before any I/O).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FollowUpError {
    /// The follow-up's job id is invalid.
    #[error("follow-up {index}: invalid job id: {source}")]
    InvalidJobId {
        /// The follow-up's index in the effect.
        index: usize,
        /// Why.
        source: InvalidJobId,
    },
    /// Two follow-ups of one effect have the same job id: the consumer
    /// would apply only one of them.
    #[error("follow-ups {first} and {second} have the same job id")]
    SameJobIdTwice {
        /// The first one's index.
        first: usize,
        /// The second one's index.
        second: usize,
    },
    /// An empty queue URL or body (SQS refuses an empty body).
    #[error("follow-up {index} has an empty {what}")]
    Empty {
        /// The follow-up's index.
        index: usize,
        /// `queue URL` or `body`.
        what: &'static str,
    },
    /// Over [`MAX_FOLLOW_UP_BYTES`].
    #[error("follow-up {index} is {bytes} bytes; at most {MAX_FOLLOW_UP_BYTES} are sent")]
    TooLarge {
        /// The follow-up's index.
        index: usize,
        /// Body plus attributes, as SQS counts them.
        bytes: usize,
    },
    /// More than SQS's 10 message attributes with `idemq-job-id` and
    /// `idemq-first-enqueued` (which a re-send from the marker carries):
    /// at most 8 of its own.
    #[error(
        "follow-up {index} has {count} message attributes with idemq-job-id and idemq-first-enqueued (set when it is re-sent from the marker); SQS takes at most {MAX_ATTRIBUTES}"
    )]
    TooManyAttributes {
        /// The follow-up's index.
        index: usize,
        /// The count with `idemq-job-id` and `idemq-first-enqueued`.
        count: usize,
    },
    /// An attribute in idemq's own `idemq-` namespace.
    #[error("follow-up {index} sets the attribute {name:?}; idemq- attributes are idemq's own")]
    ReservedAttribute {
        /// The follow-up's index.
        index: usize,
        /// The attribute.
        name: String,
    },
    /// A queue named `*.fifo` needs a message group.
    #[error("follow-up {index} goes to a FIFO queue and has no message group")]
    MissingGroup {
        /// The follow-up's index.
        index: usize,
    },
    /// An effect without a marker has nowhere to keep its follow-ups, so a
    /// redelivery could not re-send them.
    #[error("an effect without a marker (Effect::without_marker) cannot carry follow-ups")]
    NoMarker,
    /// The marker item with its follow-ups is over DynamoDB's 400 KB.
    #[error(
        "the marker with its follow-ups is {bytes} bytes; a DynamoDB item holds at most {limit}"
    )]
    MarkerTooLarge {
        /// The marker item's size, follow-ups included.
        bytes: usize,
        /// DynamoDB's limit.
        limit: usize,
    },
}

impl FollowUp {
    /// A follow-up whose body is `payload` as JSON.
    pub fn new<T: Serialize + ?Sized>(
        queue_url: impl Into<String>,
        job_id: impl Into<String>,
        payload: &T,
    ) -> Result<Self, SendError> {
        let job = Job::new(job_id, payload)?;
        Ok(Self::raw(queue_url, job.id, job.body))
    }

    /// A follow-up whose body is sent byte for byte.
    pub fn raw(
        queue_url: impl Into<String>,
        job_id: impl Into<String>,
        body: impl Into<String>,
    ) -> Self {
        Self {
            queue_url: queue_url.into(),
            job_id: job_id.into(),
            body: body.into(),
            group_id: None,
            attributes: HashMap::new(),
        }
    }

    /// The follow-up in FIFO message group `group` (required on a FIFO
    /// queue). Its deduplication id is derived from its job id
    /// ([`crate::producer::deduplication_id`]).
    pub fn in_group(mut self, group: impl Into<String>) -> Self {
        self.group_id = Some(group.into());
        self
    }

    /// Adds a message attribute (`idemq-job-id` is set by idemq).
    pub fn attribute(mut self, name: impl Into<String>, value: MessageAttributeValue) -> Self {
        self.attributes.insert(name.into(), value);
        self
    }

    /// Adds a `String` message attribute.
    pub fn string_attribute(self, name: impl Into<String>, value: impl Into<String>) -> Self {
        let value = MessageAttributeValue::builder()
            .data_type("String")
            .string_value(value)
            .build()
            .expect("a data type is set");
        self.attribute(name, value)
    }

    /// The queue it is sent to.
    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }

    /// Its job id, sent as `idemq-job-id`.
    pub fn job_id(&self) -> &str {
        &self.job_id
    }

    /// Its body.
    pub fn body(&self) -> &str {
        &self.body
    }

    /// Its FIFO message group.
    pub fn group_id(&self) -> Option<&str> {
        self.group_id.as_deref()
    }

    /// Its message attributes (without `idemq-job-id`).
    pub fn attributes(&self) -> &HashMap<String, MessageAttributeValue> {
        &self.attributes
    }

    /// The message the producer sends.
    /// A follow-up as a store read it back from a marker, already checked
    /// when it was committed.
    pub(crate) fn from_parts(
        queue_url: String,
        job_id: String,
        body: String,
        group_id: Option<String>,
        attributes: HashMap<String, MessageAttributeValue>,
    ) -> Self {
        Self {
            queue_url,
            job_id,
            body,
            group_id,
            attributes,
        }
    }

    pub(crate) fn to_job(&self) -> Job {
        let mut job = Job::raw(&self.job_id, &self.body);
        job.group_id = self.group_id.clone();
        job.attributes = self.attributes.clone();
        job
    }

    fn check(&self, index: usize) -> Result<(), FollowUpError> {
        JobId::new(self.job_id.as_str())
            .map_err(|source| FollowUpError::InvalidJobId { index, source })?;
        if self.queue_url.is_empty() {
            return Err(FollowUpError::Empty {
                index,
                what: "queue URL",
            });
        }
        if self.body.is_empty() {
            return Err(FollowUpError::Empty {
                index,
                what: "body",
            });
        }
        if let Some(name) = self
            .attributes
            .keys()
            .find(|n| n.starts_with(IDEMQ_ATTRIBUTE_PREFIX))
        {
            return Err(FollowUpError::ReservedAttribute {
                index,
                name: name.clone(),
            });
        }
        // A re-send from the marker adds idemq-first-enqueued: a follow-up
        // must fit SQS's limits as re-sent, since one refused then could
        // never be sent.
        let count = attributes_with_job_id(self.attributes.keys()) + 1;
        if count > MAX_ATTRIBUTES {
            return Err(FollowUpError::TooManyAttributes { index, count });
        }
        let bytes = self.to_job().first_enqueued(latest_first_enqueued()).size();
        if bytes > MAX_FOLLOW_UP_BYTES {
            return Err(FollowUpError::TooLarge { index, bytes });
        }
        // The name is the queue URL's last segment.
        let fifo = self.queue_url.trim_end_matches('/').ends_with(".fifo");
        if fifo && self.group_id.is_none() {
            return Err(FollowUpError::MissingGroup { index });
        }
        Ok(())
    }
}

/// Checks an effect's follow-ups before any I/O: each one as SQS would take
/// it, no job id twice, and a marker to store them in (`has_marker`).
pub(crate) fn check_all(list: &[FollowUp], has_marker: bool) -> Result<(), FollowUpError> {
    if list.is_empty() {
        return Ok(());
    }
    if !has_marker {
        return Err(FollowUpError::NoMarker);
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (index, f) in list.iter().enumerate() {
        f.check(index)?;
        if let Some(&first) = seen.get(f.job_id.as_str()) {
            return Err(FollowUpError::SameJobIdTwice {
                first,
                second: index,
            });
        }
        seen.insert(&f.job_id, index);
    }
    Ok(())
}

/// `list` for a failure record: each follow-up's job id and queue name,
/// never its body.
pub(crate) fn describe(list: &[FollowUp]) -> String {
    list.iter()
        .map(|f| {
            let queue = f.queue_url.rsplit('/').next().unwrap_or(&f.queue_url);
            format!("{} to {queue}", f.job_id)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A duplicate's marker as stored, with what deciding on its follow-ups
/// needs: the store reads it, and the batch re-sends the follow-ups it
/// carries while its commit is within the horizon (the module doc). Only
/// a store builds one.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredMarker {
    /// The follow-ups the marker stores, as the store decoded them; an
    /// `Err` says why they could not be (a transient failure: the marker
    /// is not one idemq wrote as it is now).
    pub(crate) follow_ups: Result<Vec<FollowUp>, String>,
    /// The job's id.
    pub(crate) job_id: String,
    /// When the marker was committed; `None` for a fused marker written by
    /// a version that stored no commit time.
    pub(crate) committed_at: Option<SystemTime>,
    /// The consumer's follow-up horizon: its marker TTL less the replay
    /// window, the same horizon the tools that copy dead letters keep. A
    /// duplicate re-sends its stored follow-ups only while its marker's
    /// commit is younger than it (see the module doc); the window it leaves
    /// before the TTL is the child's own, to be consumed before markers
    /// committed after its parent's may expire.
    pub(crate) horizon: ReplayHorizon,
}

impl StoredMarker {
    /// The follow-ups the marker stores, or why they could not be read.
    pub fn follow_ups(&self) -> Result<&[FollowUp], &str> {
        self.follow_ups.as_deref().map_err(String::as_str)
    }

    /// When the marker was committed, when the store knows.
    pub fn committed_at(&self) -> Option<SystemTime> {
        self.committed_at
    }
}
