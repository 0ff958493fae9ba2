//! Dead letters with context, and the tools to act on them.
//!
//! SQS's native redrive moves a message to the DLQ after maxReceiveCount
//! receives but keeps no trace of *why*. So every failed attempt writes a
//! failure record (job id, attempt, error and its chain, time, source queue,
//! payload hash) to the idemq table ([`record`]), and a message
//! dead-lettered by idemq itself (a permanent failure) also carries that
//! context as `idemq-*` attributes, as far as SQS's limits allow: the
//! copy always carries the producer's attributes and `idemq-job-id`, and
//! the context only what is left of the 10 attributes and of the DLQ's
//! `MaximumMessageSize` ([`DeadLetters::send`]), so it is never refused
//! for idemq's additions and can always be redriven.
//!
//! The operator side (`idemq dlq`): [`peek`] reads the DLQ without consuming
//! it, [`redrive`] moves dead letters back (sending before deleting, so a
//! kill at any instant loses nothing); the `idemq dlq export` / `import`
//! commands keep them as JSON lines.

pub mod peek;
pub mod record;
pub mod redrive;

pub use record::{
    ATTR_ATTEMPTS, ATTR_ERROR, ATTR_FAILED_AT, ATTR_SOURCE_QUEUE, DeadLetter, DeadLetters,
    FailureRecord, MAX_RECORD_CHAIN, MAX_RECORD_ERROR,
};

/// An error of the dead-letter tools or of a failure record write.
#[derive(Debug, thiserror::Error)]
pub enum DlqError {
    /// A DynamoDB call failed (failure records).
    #[error("DynamoDB: {0}")]
    DynamoDb(String),
    /// An SQS call failed.
    #[error("SQS: {0}")]
    Sqs(String),
    /// The message alone (body, producer attributes, `idemq-job-id`) is
    /// over the DLQ's `MaximumMessageSize`.
    #[error(
        "message {message_id} is {bytes} bytes without its dead-letter context; the DLQ takes at most {limit}"
    )]
    TooLarge {
        /// The message's `MessageId`.
        message_id: String,
        /// Its size as SQS counts it.
        bytes: usize,
        /// The DLQ's `MaximumMessageSize`.
        limit: usize,
    },
}
