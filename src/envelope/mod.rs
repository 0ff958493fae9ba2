//! Jobs that arrive wrapped: SNS → SQS and EventBridge → SQS envelopes.
//!
//! A queue subscribed to an SNS topic (raw message delivery off) receives
//! each publish as an SNS notification document whose `Message` is what the
//! producer published; its `MessageId`, `Timestamp` and `Signature` are new on
//! every publish
//! (<https://docs.aws.amazon.com/sns/latest/dg/sns-large-payload-raw-message-delivery.html>,
//! <https://docs.aws.amazon.com/sns/latest/dg/http-notification-json.html>).
//! A queue that is the target of an EventBridge rule receives the whole
//! event, whose `detail` is what the producer put and whose `id` and `time`
//! are minted by EventBridge
//! (<https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-events-structure.html>).
//! Hashing such a body as it is would make a producer's retry of the same
//! job a different payload: a conflict, dead-lettered.
//!
//! With [`Envelope::Sns`] or [`Envelope::EventBridge`] (`IDEMQ_ENVELOPE`),
//! the job is the inner message: the handler decodes it, the payload hash
//! covers it alone, and the job id is found in the envelope
//! ([`JobIdResolver::resolve_job`](crate::job::JobIdResolver::resolve_job), the one place a message becomes a job).

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::attribute::JOB_ID_ATTRIBUTE;

mod error;
mod eventbridge;
mod exact;
mod fields;
mod sns;
#[cfg(test)]
mod tests;

pub use error::EnvelopeError;
pub use eventbridge::canonical_json;

use eventbridge::open_eventbridge;
use sns::open_sns;

/// How a job is wrapped in the SQS message body.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Envelope {
    /// The body is the job (a producer's `SendMessage`, or SNS with raw
    /// message delivery on).
    #[default]
    None,
    /// The body is an SNS notification (an SQS subscription with raw
    /// message delivery off): the job is its `Message`.
    Sns,
    /// The body is an EventBridge event (a rule's SQS target without an
    /// input transformer): the job is its `detail`.
    EventBridge,
}

impl Envelope {
    /// The variable that selects the envelope: `none` (default), `sns` or
    /// `eventbridge`.
    pub const ENV_VAR: &'static str = "IDEMQ_ENVELOPE";

    /// How errors name it: `SNS`, `EventBridge`, `plain`.
    const fn label(self) -> &'static str {
        match self {
            Self::None => "plain",
            Self::Sns => "SNS",
            Self::EventBridge => "EventBridge",
        }
    }

    /// The `IDEMQ_ENVELOPE` value that selects it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Sns => "sns",
            Self::EventBridge => "eventbridge",
        }
    }

    /// The job inside `body`: its payload, and what the envelope says of
    /// its identity. Never fails for [`Envelope::None`].
    ///
    /// ```
    /// use idemq::envelope::Envelope;
    /// let body = r#"{"Type":"Notification","MessageId":"m-1","Message":"{\"n\":1}",
    ///     "MessageAttributes":{"idemq-job-id":{"Type":"String","Value":"job-7"}}}"#;
    /// let job = Envelope::Sns.open(body).unwrap();
    /// assert_eq!(job.payload, r#"{"n":1}"#);
    /// assert_eq!(job.job_id_attribute.as_deref(), Some("job-7"));
    /// assert_eq!(job.envelope_id.as_deref(), Some("m-1"));
    /// ```
    pub fn open(self, body: &str) -> Result<Opened<'_>, EnvelopeError> {
        match self {
            Self::None => Ok(Opened {
                payload: Cow::Borrowed(body),
                job_id_attribute: None,
                envelope_id: None,
            }),
            Self::Sns => open_sns(body),
            Self::EventBridge => open_eventbridge(body),
        }
    }
}

impl fmt::Display for Envelope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Envelope {
    type Err = UnknownEnvelope;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "none" => Ok(Self::None),
            "sns" => Ok(Self::Sns),
            "eventbridge" => Ok(Self::EventBridge),
            _ => Err(UnknownEnvelope),
        }
    }
}

/// A value of `IDEMQ_ENVELOPE` that names no envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("expected one of none, sns, eventbridge")]
pub struct UnknownEnvelope;

/// The job inside a message body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened<'a> {
    /// What the handler decodes and the payload hash covers: the SNS
    /// `Message` byte for byte, or the EventBridge `detail` as canonical
    /// JSON (see [`canonical_json`]) with every number exactly as the event
    /// wrote it where an f64 would round it.
    pub payload: Cow<'a, str>,
    /// The `idemq-job-id` SNS message attribute (inside the envelope).
    pub job_id_attribute: Option<String>,
    /// The SNS `MessageId` or the EventBridge event `id`: new on every
    /// publish, the same on SNS's or EventBridge's own delivery retries and
    /// on every SQS redelivery and redrive (it is in the body).
    pub envelope_id: Option<String>,
}

/// Set once this process has warned that it identifies a job by its
/// envelope's id.
static ENVELOPE_ID_IDENTITY_WARNED: AtomicBool = AtomicBool::new(false);

/// Logs, once per process, that a job was identified by its SNS `MessageId`
/// or EventBridge event `id`, and what that costs. True the one time it
/// logs. That id survives SQS redeliveries and redrives (it is in the body)
/// and SNS's and EventBridge's own delivery retries, but a producer's retry
/// of the publish is a new notification or event with a new id: a new job,
/// applied again.
pub fn warn_envelope_id_identity(envelope: Envelope) -> bool {
    if ENVELOPE_ID_IDENTITY_WARNED.swap(true, Ordering::Relaxed) {
        return false;
    }
    let (id, fix) = match envelope {
        Envelope::EventBridge => (
            "EventBridge event id",
            "set IDEMQ_JOB_ID_POINTER to the id in `detail`",
        ),
        _ => (
            "SNS MessageId",
            "publish with the idemq-job-id message attribute (idemq::topic::TopicProducer and `idemq send --topic-arn` do) or set IDEMQ_JOB_ID_POINTER",
        ),
    };
    tracing::warn!(
        "a job has no {JOB_ID_ATTRIBUTE} and no id in its inner message, so idemq identifies it by \
         its {id}. That id survives SQS redeliveries and redrives, but a producer's retry of the \
         publish gets a new one: a new job, applied again. To make retries duplicates, {fix}. \
         (Logged once per process.)"
    );
    true
}
