//! Dead letters with context: the runtime side of a failed job.
//!
//! SQS's native redrive moves a message to the DLQ after maxReceiveCount
//! receives but keeps no trace of *why*. So every failed attempt writes a
//! failure record (job id, attempt, error and its chain, time, source queue,
//! payload hash) to the store ([`FailureRecord`],
//! [`Store::record_failure`](crate::store::Store::record_failure)), and a message dead-lettered by idemq itself (a
//! permanent failure) also carries that context as `idemq-*` attributes, as
//! far as SQS's limits allow: the copy always carries the producer's
//! attributes and `idemq-job-id`, and the context only what is left of the
//! 10 attributes and of the DLQ's `MaximumMessageSize`
//! ([`DeadLetters::send`]), so it is never refused for idemq's additions
//! and can always be redriven.
//!
//! The operator's tools that read and replay them are in [`crate::dlq`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use aws_sdk_sqs::config::http::HttpResponse;
use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::operation::send_message::SendMessageError;
use aws_sdk_sqs::types::{MessageAttributeValue, QueueAttributeName};

use crate::failure::{DlqError, FailureRecord, truncate};
use crate::job::{FIRST_ENQUEUED_ATTRIBUTE, IDEMQ_ATTRIBUTE_PREFIX, JOB_ID_ATTRIBUTE};
use crate::producer::{
    DEFAULT_MAX_MESSAGE_BYTES, INVALID_MESSAGE_CODES, MAX_ATTRIBUTES, attributes_with_job_id,
    message_size, spare_attribute_slots,
};

/// Dead-letter context attribute: the last error, capped.
pub const ATTR_ERROR: &str = "idemq-error";
/// Dead-letter context attribute: attempts made.
pub const ATTR_ATTEMPTS: &str = "idemq-attempts";
/// Dead-letter context attribute: when it failed (RFC 3339).
pub const ATTR_FAILED_AT: &str = "idemq-failed-at";
/// Dead-letter context attribute: the source queue's name.
pub const ATTR_SOURCE_QUEUE: &str = "idemq-source-queue";
/// Dead-letter context attribute: which deploy failed and its idemq
/// version, `7, idemq 0.1.0` (or `idemq 0.1.0` where the deploy is not
/// known; [`crate::failure::deploy`]).
pub const ATTR_DEPLOY: &str = "idemq-deploy";
/// Dead-letter context attribute: where it failed, the first frames of
/// the failure's backtrace (the user's first; the failure record keeps
/// the rest: [`crate::failure::Failure::backtrace`]).
pub const ATTR_BACKTRACE: &str = "idemq-backtrace";
/// Longest context attribute value, in bytes; the record keeps the whole
/// error (within [`MAX_RECORD_ERROR`] and the chain caps).
const MAX_CONTEXT_VALUE: usize = 1024;
/// Sends permanent failures to the DLQ with their context. (Failure
/// records are the store's: [`Store::record_failure`](crate::store::Store::record_failure).)
#[derive(Debug, Clone)]
pub struct DeadLetters {
    sqs: aws_sdk_sqs::Client,
    /// `MaximumMessageSize` of each DLQ sent to, read once.
    dlq_sizes: Arc<Mutex<HashMap<String, usize>>>,
}

impl DeadLetters {
    /// Sends dead letters with `sqs`.
    pub fn new(sqs: aws_sdk_sqs::Client) -> Self {
        Self {
            sqs,
            dlq_sizes: Arc::default(),
        }
    }

    /// Sends a permanent failure to the DLQ now: its body, its producer's
    /// attributes, `idemq-job-id` = the id the consumer resolved, and as
    /// much of the failure's context as fits, as `idemq-*` attributes.
    ///
    /// The copy is a new message with a new MessageId (a `SendMessage`, not
    /// SQS's redrive), so the job id is stamped on it: a job identified by
    /// its MessageId keeps that identity through a later redrive. A message
    /// whose job id could not be resolved has none to stamp: it keeps the
    /// `idemq-job-id` its producer sent (if any), and its failure record
    /// stays keyed by its source MessageId (`failure-message#…`).
    ///
    /// What the copy carries, in order of need, so that the send is never
    /// refused for idemq's own additions (a refused send would leave the
    /// message on the source queue and rerun the handler on every receive):
    /// - `idemq-first-enqueued`, the job's first-enqueued time
    ///   ([`DeadLetter::first_enqueued`]), in the first slot the producer's
    ///   attributes and `idemq-job-id` leave: the letter's own
    ///   `SentTimestamp` is the time of this send, so without it a replay
    ///   would take the job for a new one ([`crate::horizon`]). A message
    ///   with nine attributes of its own has no slot for it (logged);
    /// - the context only takes the attribute slots that the producer's
    ///   attributes and `idemq-job-id` leave of SQS's 10,
    ///   filled in the order error, attempts, failed-at, source queue,
    ///   deploy, backtrace (its first frames); every
    ///   value has characters SQS refuses replaced with U+FFFD and is capped;
    /// - if the copy would not fit the DLQ's `MaximumMessageSize`, the
    ///   context is left out (the failure record keeps it);
    /// - if SQS still refuses the copy as invalid
    ///   (`InvalidMessageContents`, `InvalidParameterValue`, …), it is sent again bare: body, producer
    ///   attributes and `idemq-job-id`.
    ///
    /// Fails (and the message stays on its queue) only when the bare
    /// message itself does not fit the DLQ, or SQS refuses it.
    pub async fn send(
        &self,
        dlq_url: &str,
        message: &DeadLetter<'_>,
        rec: &FailureRecord,
    ) -> Result<(), DlqError> {
        let bare = bare_attributes(message.attributes, rec, message.first_enqueued);
        let limit = self.max_message_bytes(dlq_url).await;
        let bytes = message_size(message.body, &bare);
        if bytes > limit {
            return Err(DlqError::TooLarge {
                message_id: rec.message_id.clone(),
                bytes,
                limit,
            });
        }
        let context = context_attributes(rec, spare_attribute_slots(bare.keys()));
        let mut full = bare.clone();
        full.extend(context);
        if message_size(message.body, &full) > limit {
            tracing::warn!(
                message_id = rec.message_id,
                bytes = message_size(message.body, &full),
                limit,
                "dead letter too large with its context; the context is in the failure record only"
            );
            full = bare.clone();
        } else if full.len() - bare.len() < CONTEXT_ATTRIBUTES.len() {
            tracing::info!(
                message_id = rec.message_id,
                "message has {} attributes; only {} context attributes fit, the rest is in the failure record",
                bare.len(),
                full.len() - bare.len()
            );
        }
        let with_context = full.len() > bare.len();
        match self.send_one(dlq_url, message, rec, full).await {
            Err(e) if with_context && refused_as_invalid(&e) => {
                tracing::warn!(
                    message_id = rec.message_id,
                    "SQS refused the dead letter with its context ({}); sending it bare",
                    e.code().unwrap_or("?")
                );
                self.send_one(dlq_url, message, rec, bare)
                    .await
                    .map_err(|e| DlqError::Sqs(DisplayErrorContext(e).to_string()))
            }
            r => r.map_err(|e| DlqError::Sqs(DisplayErrorContext(e).to_string())),
        }
    }

    async fn send_one(
        &self,
        dlq_url: &str,
        message: &DeadLetter<'_>,
        rec: &FailureRecord,
        attributes: HashMap<String, MessageAttributeValue>,
    ) -> Result<(), SdkError<SendMessageError, HttpResponse>> {
        let mut send = self
            .sqs
            .send_message()
            .queue_url(dlq_url)
            .message_body(message.body)
            .set_message_attributes(Some(attributes));
        if let Some(group) = message.group_id {
            // The message id is unique per message: a retried send of the
            // same dead letter is dropped by FIFO dedup, not stored twice.
            send = send
                .message_group_id(group)
                .message_deduplication_id(&rec.message_id);
        }
        send.send().await.map(|_| ())
    }

    /// The DLQ's `MaximumMessageSize`, read once per DLQ. If it cannot be
    /// read, SQS's largest size is assumed (not remembered): a copy over
    /// the real limit is then refused and sent again bare.
    async fn max_message_bytes(&self, dlq_url: &str) -> usize {
        if let Some(&n) = self.dlq_sizes.lock().expect("lock").get(dlq_url) {
            return n;
        }
        let read = crate::queue::attributes(
            &self.sqs,
            dlq_url,
            &[QueueAttributeName::MaximumMessageSize],
        )
        .await;
        let size = match read {
            Ok(attrs) => attrs
                .get(&QueueAttributeName::MaximumMessageSize)
                .and_then(|v| v.parse::<usize>().ok()),
            Err(e) => {
                tracing::warn!("could not read MaximumMessageSize of the DLQ: {e}");
                None
            }
        };
        match size {
            Some(n) => {
                self.dlq_sizes
                    .lock()
                    .expect("lock")
                    .insert(dlq_url.to_owned(), n);
                n
            }
            None => DEFAULT_MAX_MESSAGE_BYTES,
        }
    }
}

/// The attributes of the bare dead letter: the producer's attributes
/// (every `idemq-*` one dropped: a stale job id or an earlier death's
/// context), `idemq-job-id` = the resolved job id and, when a slot is
/// left, `idemq-first-enqueued` = `first_enqueued`.
fn bare_attributes(
    received: &HashMap<String, MessageAttributeValue>,
    rec: &FailureRecord,
    first_enqueued: Option<SystemTime>,
) -> HashMap<String, MessageAttributeValue> {
    let mut attrs: HashMap<String, MessageAttributeValue> = received
        .iter()
        .filter(|(name, _)| !name.starts_with(IDEMQ_ATTRIBUTE_PREFIX))
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect();
    // A resolved id came from SQS (attribute, body or MessageId), so SQS
    // accepts it as text; the check only guards that belief.
    let resolved = rec.job_id.as_deref().filter(|id| is_sqs_text(id));
    match resolved.and_then(string_attribute) {
        Some(v) => {
            attrs.insert(JOB_ID_ATTRIBUTE.to_owned(), v);
        }
        None => {
            // No valid job id: nothing to stamp. Keep what the producer
            // sent, so a redrive refuses the same invalid id instead of
            // minting a new identity; the failure record is keyed by the
            // source MessageId.
            if let Some(v) = received.get(JOB_ID_ATTRIBUTE) {
                attrs.insert(JOB_ID_ATTRIBUTE.to_owned(), v.clone());
            }
        }
    }
    if attrs.contains_key(JOB_ID_ATTRIBUTE) && attributes_with_job_id(attrs.keys()) > MAX_ATTRIBUTES
    {
        // Ten producer attributes and no `idemq-job-id`: the stamp does not
        // fit. Sent as received, which SQS accepted once; such a message
        // cannot be redriven by idemq either (the producer refuses 11).
        tracing::warn!(
            message_id = rec.message_id,
            "message has {} attributes of its own; dead-lettered without idemq-job-id",
            attrs.len() - 1
        );
        return received.clone();
    }
    if let Some(at) = first_enqueued {
        let mut with = attrs.clone();
        with.insert(
            FIRST_ENQUEUED_ATTRIBUTE.to_owned(),
            crate::job::first_enqueued_value(at),
        );
        if attributes_with_job_id(with.keys()) <= MAX_ATTRIBUTES {
            return with;
        }
        // Nine attributes of the producer's and idemq-job-id: a replay of
        // this letter takes its SentTimestamp (this send) for the job's
        // first enqueue.
        tracing::warn!(
            message_id = rec.message_id,
            "message has {} attributes of its own; dead-lettered without idemq-first-enqueued",
            attrs.len() - 1
        );
    }
    attrs
}

/// The context attributes, in the order they get the spare slots.
const CONTEXT_ATTRIBUTES: [&str; 6] = [
    ATTR_ERROR,
    ATTR_ATTEMPTS,
    ATTR_FAILED_AT,
    ATTR_SOURCE_QUEUE,
    ATTR_DEPLOY,
    ATTR_BACKTRACE,
];

/// The value of [`ATTR_BACKTRACE`]: as many whole frames of the record's
/// backtrace as fit [`MAX_CONTEXT_VALUE`], and a line saying so when some
/// do not. Empty (left out) when the record has none.
fn backtrace_attribute(rec: &FailureRecord) -> String {
    let Some(bt) = rec.failure.backtrace.as_deref() else {
        return String::new();
    };
    let bt = sqs_text(bt);
    if bt.len() <= MAX_CONTEXT_VALUE {
        return bt;
    }
    const NOTE: &str = "\n… (the failure record has the whole backtrace)";
    let mut end = 0;
    for (at, _) in bt.match_indices('\n') {
        if at + NOTE.len() > MAX_CONTEXT_VALUE {
            break;
        }
        // A frame's location line stays with its name.
        if !bt[at + 1..].starts_with("    at ") {
            end = at;
        }
    }
    format!("{}{NOTE}", &bt[..end])
}

/// The value of [`ATTR_DEPLOY`] for a record: empty (left out) when the
/// record names neither.
fn deploy_attribute(rec: &FailureRecord) -> String {
    deploy_value(&rec.deploy, &rec.idemq_version)
}

/// `deploy, idemq version` ([`ATTR_DEPLOY`]'s form), either part left out
/// where it is empty; empty when both are.
pub(crate) fn deploy_value(deploy: &str, idemq_version: &str) -> String {
    match (deploy, idemq_version) {
        ("", "") => String::new(),
        ("", v) => format!("idemq {v}"),
        (d, "") => d.to_owned(),
        (d, v) => format!("{d}, idemq {v}"),
    }
}

/// The deploy and the idemq version an [`ATTR_DEPLOY`] value names (each
/// empty where it does not): read back by the operator tools.
#[cfg(any(feature = "ops", test))]
pub(crate) fn parse_deploy(value: &str) -> (String, String) {
    if let Some(v) = value.strip_prefix("idemq ") {
        return (String::new(), v.to_owned());
    }
    match value.rsplit_once(", idemq ") {
        Some((d, v)) => (d.to_owned(), v.to_owned()),
        None => (value.to_owned(), String::new()),
    }
}

/// At most `slots` context attributes, in [`CONTEXT_ATTRIBUTES`] order;
/// values SQS-safe and capped, empty ones (SQS refuses them) left out.
fn context_attributes(rec: &FailureRecord, slots: usize) -> Vec<(String, MessageAttributeValue)> {
    let value = |name: &str| match name {
        ATTR_ERROR => rec.failure.full(),
        ATTR_ATTEMPTS => rec.attempt.to_string(),
        ATTR_FAILED_AT => rfc3339(rec.failed_at),
        ATTR_SOURCE_QUEUE => rec.source_queue.clone(),
        ATTR_DEPLOY => deploy_attribute(rec),
        _ => backtrace_attribute(rec),
    };
    CONTEXT_ATTRIBUTES
        .iter()
        .filter_map(|&name| {
            let text = truncate(&sqs_text(&value(name)), MAX_CONTEXT_VALUE);
            if text.is_empty() {
                return None;
            }
            let data_type = if name == ATTR_ATTEMPTS {
                "Number"
            } else {
                "String"
            };
            let v = MessageAttributeValue::builder()
                .data_type(data_type)
                .string_value(text)
                .build()
                .ok()?;
            Some((name.to_owned(), v))
        })
        .take(slots)
        .collect()
}

fn string_attribute(value: &str) -> Option<MessageAttributeValue> {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(value)
        .build()
        .ok()
}

/// Whether SQS accepts `c` in a body or a String attribute value: `#x9 |
/// #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF`
/// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html>;
/// attribute values "have the same restrictions as the message body",
/// <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-message-metadata.html>).
/// A Rust `char` is never a surrogate, so the gap at #xD800 needs no test.
fn sqs_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{FFFD}' | '\u{10000}'..='\u{10FFFF}')
}

fn is_sqs_text(s: &str) -> bool {
    s.chars().all(sqs_char)
}

/// `s` with every character SQS refuses replaced by U+FFFD.
fn sqs_text(s: &str) -> String {
    s.chars()
        .map(|c| if sqs_char(c) { c } else { '\u{FFFD}' })
        .collect()
}

/// Whether SQS refused a send because of the message itself.
fn refused_as_invalid(e: &SdkError<SendMessageError, HttpResponse>) -> bool {
    e.as_service_error()
        .and_then(|s| s.code())
        .is_some_and(|code| INVALID_MESSAGE_CODES.contains(&bare_code(code)))
}

/// An SQS error code without the forms it may come in: a namespace
/// (`AWS.SimpleQueueService.X`, `com.amazonaws.sqs#X`) or the JSON
/// protocol's `Exception` suffix (LocalStack 2026.3 answers an invalid
/// attribute value with `InvalidParameterValue` in the query-compatible
/// header and `InvalidParameterValueException` as its type).
fn bare_code(code: &str) -> &str {
    let code = code.rsplit(['.', '#']).next().unwrap_or(code);
    code.strip_suffix("Exception").unwrap_or(code)
}

/// What `DeadLetters::send` needs of the original message.
#[derive(Debug, Clone)]
pub struct DeadLetter<'a> {
    /// The original body.
    pub body: &'a str,
    /// The original message attributes.
    pub attributes: &'a HashMap<String, MessageAttributeValue>,
    /// `MessageGroupId`, for a FIFO DLQ.
    pub group_id: Option<&'a str>,
    /// When the job's first copy was enqueued
    /// ([`Message::first_enqueued`](crate::batch::Message::first_enqueued)),
    /// carried as `idemq-first-enqueued`; `None` if unknown.
    pub first_enqueued: Option<SystemTime>,
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

#[cfg(test)]
mod tests;
