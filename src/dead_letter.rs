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
    match (rec.deploy.as_str(), rec.idemq_version.as_str()) {
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
mod tests {
    use super::*;
    use crate::failure::{Failure, MAX_RECORD_CHAIN, MAX_RECORD_ERROR, capped_chain};
    use std::time::{Duration, UNIX_EPOCH};

    use crate::failure::FailureKind;
    use proptest::prelude::*;

    fn attr(v: &str) -> MessageAttributeValue {
        string_attribute(v).unwrap()
    }

    fn record(job_id: Option<&str>, error: &str) -> FailureRecord {
        FailureRecord {
            job_id: job_id.map(str::to_owned),
            message_id: "m-1".into(),
            attempt: 3,
            failure: Failure {
                kind: FailureKind::Permanent,
                error: error.into(),
                chain: vec![],
                backtrace: Some("orders::charge\n    at ./src/main.rs:9:5".into()),
            },
            failed_at: UNIX_EPOCH + Duration::from_secs(1_800_000_000),
            source_queue: "orders".into(),
            payload_hash: "h".into(),
            deploy: "7".into(),
            idemq_version: "0.1.0".into(),
        }
    }

    fn producer_attributes(n: usize) -> HashMap<String, MessageAttributeValue> {
        (0..n).map(|i| (format!("p{i}"), attr("v"))).collect()
    }

    #[test]
    fn context_values_are_sqs_text_and_capped() {
        assert!(sqs_char('\t') && sqs_char('\n') && sqs_char('\r') && sqs_char(' '));
        assert!(sqs_char('\u{7f}') && sqs_char('\u{D7FF}') && sqs_char('\u{E000}'));
        assert!(sqs_char('\u{FFFD}') && sqs_char('\u{10000}') && sqs_char('\u{10FFFF}'));
        for bad in [
            '\0', '\u{1}', '\u{8}', '\u{b}', '\u{c}', '\u{1f}', '\u{FFFE}', '\u{FFFF}',
        ] {
            assert!(!sqs_char(bad), "{bad:?}");
        }
        assert_eq!(sqs_text("a\u{0}b\u{FFFF}c\td"), "a\u{FFFD}b\u{FFFD}c\td");

        let rec = record(Some("j"), &format!("bad\u{1}{}", "é".repeat(2000)));
        let ctx: HashMap<String, MessageAttributeValue> =
            context_attributes(&rec, 4).into_iter().collect();
        let err = ctx[ATTR_ERROR].string_value().unwrap();
        assert!(err.starts_with("bad\u{FFFD}é"), "{err}");
        assert!(
            err.len() <= MAX_CONTEXT_VALUE + 32 && err.contains("[cut:"),
            "{err}"
        );
        assert!(is_sqs_text(err));
        assert_eq!(ctx[ATTR_ATTEMPTS].data_type(), "Number");
        assert_eq!(ctx[ATTR_ATTEMPTS].string_value(), Some("3"));
        assert_eq!(ctx[ATTR_SOURCE_QUEUE].string_value(), Some("orders"));
    }

    #[test]
    fn context_takes_only_the_spare_slots_error_first_and_never_empty_values() {
        let rec = record(Some("j"), "boom");
        let names = |slots| {
            context_attributes(&rec, slots)
                .into_iter()
                .map(|(n, _)| n)
                .collect::<Vec<_>>()
        };
        assert_eq!(names(0), Vec::<String>::new());
        assert_eq!(names(1), vec![ATTR_ERROR]);
        assert_eq!(names(2), vec![ATTR_ERROR, ATTR_ATTEMPTS]);
        assert_eq!(names(9), CONTEXT_ATTRIBUTES.to_vec());
        // SQS refuses an empty value: an empty error or queue is left out.
        let mut empty = record(Some("j"), "");
        empty.source_queue.clear();
        let got: Vec<String> = context_attributes(&empty, 4)
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(
            got,
            vec![ATTR_ATTEMPTS, ATTR_FAILED_AT, ATTR_DEPLOY, ATTR_BACKTRACE]
        );
    }

    #[test]
    fn the_backtrace_attribute_keeps_whole_frames_within_its_cap() {
        let mut rec = record(Some("j"), "boom");
        assert_eq!(
            backtrace_attribute(&rec),
            "orders::charge\n    at ./src/main.rs:9:5"
        );
        let frames: Vec<String> = (0..100)
            .map(|i| format!("orders::step_{i}\n    at ./src/main.rs:{i}:5"))
            .collect();
        rec.failure.backtrace = Some(frames.join("\n"));
        let value = backtrace_attribute(&rec);
        assert!(value.len() <= MAX_CONTEXT_VALUE, "{}", value.len());
        assert!(value.starts_with(&frames[..3].join("\n")), "{value}");
        let kept = value.lines().filter(|l| l.starts_with("orders::")).count();
        let located = value.lines().filter(|l| l.starts_with("    at ")).count();
        assert!(kept > 10 && kept == located, "{value}");
        assert!(value.ends_with("the failure record has the whole backtrace)"));
        rec.failure.backtrace = None;
        assert_eq!(backtrace_attribute(&rec), "");
    }

    #[test]
    fn the_deploy_attribute_names_the_deploy_and_idemq_and_reads_back() {
        let mut rec = record(Some("j"), "boom");
        for (deploy, version, value) in [
            ("7", "0.1.0", "7, idemq 0.1.0"),
            ("", "0.1.0", "idemq 0.1.0"),
            (
                "git 3f2a, idemq fork",
                "0.2.0",
                "git 3f2a, idemq fork, idemq 0.2.0",
            ),
            ("$LATEST", "", "$LATEST"),
        ] {
            rec.deploy = deploy.into();
            rec.idemq_version = version.into();
            assert_eq!(deploy_attribute(&rec), value);
            assert_eq!(parse_deploy(value), (deploy.to_owned(), version.to_owned()));
        }
        rec.deploy.clear();
        rec.idemq_version.clear();
        let names: Vec<String> = context_attributes(&rec, 9)
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert!(
            !names.iter().any(|n| n == ATTR_DEPLOY),
            "an empty value is left out"
        );
    }

    #[test]
    fn bare_letter_drops_idemq_attributes_and_stamps_the_resolved_id() {
        let mut received = producer_attributes(2);
        received.insert(JOB_ID_ATTRIBUTE.into(), attr("stale"));
        received.insert(ATTR_ERROR.into(), attr("an earlier death"));
        received.insert("idemq-other".into(), attr("x"));
        let bare = bare_attributes(&received, &record(Some("msg-id-7"), "e"), None);
        let mut names: Vec<&str> = bare.keys().map(String::as_str).collect();
        names.sort();
        assert_eq!(names, vec![JOB_ID_ATTRIBUTE, "p0", "p1"]);
        assert_eq!(bare[JOB_ID_ATTRIBUTE].string_value(), Some("msg-id-7"));

        // No resolved id: the producer's (invalid) attribute is kept as sent.
        let bare = bare_attributes(&received, &record(None, "e"), None);
        assert_eq!(bare[JOB_ID_ATTRIBUTE].string_value(), Some("stale"));
        let bare = bare_attributes(&producer_attributes(1), &record(None, "e"), None);
        assert!(!bare.contains_key(JOB_ID_ATTRIBUTE));

        // Ten attributes of its own: no room for the stamp; sent as received.
        let ten = producer_attributes(10);
        assert_eq!(
            bare_attributes(&ten, &record(Some("j"), "e"), Some(UNIX_EPOCH)),
            ten
        );
    }

    proptest! {
        /// Whatever a message carries, idemq's dead letter has at most 10
        /// attributes, the error gets a slot whenever one is spare, and the
        /// copy a redrive makes of it (idemq-* dropped, idemq-job-id set)
        /// passes the producer's attribute check.
        #[test]
        fn every_dead_letter_fits_and_can_be_sent_again(
            producer in 0usize..=9,
            stale in proptest::collection::vec(0usize..4, 0..4),
            resolved in any::<bool>(),
            carried in any::<bool>(),
        ) {
            let mut received = producer_attributes(producer);
            for i in stale {
                received.insert(CONTEXT_ATTRIBUTES[i].to_owned(), attr("old"));
            }
            if received.len() < MAX_ATTRIBUTES {
                received.insert(JOB_ID_ATTRIBUTE.into(), attr("j"));
            }
            let first = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
            if carried {
                // A copy of a copy: its own first-enqueued is replaced.
                received.insert(FIRST_ENQUEUED_ATTRIBUTE.into(), attr("1"));
            }
            let rec = record(resolved.then_some("j"), "boom");
            let bare = bare_attributes(&received, &rec, Some(first));
            let mut full = bare.clone();
            full.extend(context_attributes(&rec, spare_attribute_slots(bare.keys())));
            prop_assert!(full.len() <= MAX_ATTRIBUTES);
            // First-enqueued first, then the error, while slots are left.
            let stamped = full.get(FIRST_ENQUEUED_ATTRIBUTE).and_then(|v| v.string_value());
            prop_assert_eq!(stamped.is_some(), producer + 1 < MAX_ATTRIBUTES);
            if let Some(ms) = stamped {
                prop_assert_eq!(ms, "1700000000000");
            }
            prop_assert_eq!(full.contains_key(ATTR_ERROR), producer + 2 < MAX_ATTRIBUTES);
            let redriven = crate::producer::Job::as_received("j", "{}", full, None, None);
            prop_assert_eq!(redriven.first_enqueued_fits(), producer + 1 < MAX_ATTRIBUTES);
            let redriven = if redriven.first_enqueued_fits() {
                redriven.first_enqueued(first)
            } else {
                redriven
            };
            prop_assert!(
                crate::producer::attributes_with_job_id(redriven.attributes.keys()) <= MAX_ATTRIBUTES
            );
        }
    }

    #[test]
    fn chains_are_capped_with_a_marker_and_keep_the_root_cause() {
        let short = vec!["a".to_string(), "b".to_string()];
        assert_eq!(capped_chain(&short), short);

        let huge = vec!["x".repeat(500 * 1024)];
        let capped = capped_chain(&huge);
        assert_eq!(capped.len(), 1);
        assert!(capped[0].len() <= MAX_RECORD_ERROR + 32);
        assert!(capped[0].ends_with(&format!("[cut: {} bytes]", 500 * 1024)));

        let mut many: Vec<String> = (0..1000)
            .map(|i| format!("{i}:{}", "y".repeat(1000)))
            .collect();
        many.push("root cause".into());
        let capped = capped_chain(&many);
        let total: usize = capped.iter().map(|e| e.len() + 1).sum();
        assert!(total <= MAX_RECORD_CHAIN, "{total}");
        assert!(capped[0].starts_with("0:"));
        assert_eq!(capped.last().unwrap(), "root cause");
        let marker = &capped[capped.len() - 2];
        let kept = capped.len() - 2;
        assert_eq!(
            marker,
            &format!("… {} more causes left out (chain capped)", 1000 - kept)
        );

        // Many tiny entries: the per-element overhead counts too.
        let tiny: Vec<String> = (0..200_000).map(|_| "z".to_string()).collect();
        let total: usize = capped_chain(&tiny).iter().map(|e| e.len() + 1).sum();
        assert!(total <= MAX_RECORD_CHAIN, "{total}");
    }

    #[test]
    fn error_codes_are_compared_without_namespace_or_suffix() {
        for code in [
            "InvalidParameterValue",
            "InvalidParameterValueException",
            "AWS.SimpleQueueService.InvalidMessageContents",
            "com.amazonaws.sqs#InvalidMessageContents",
            "MessageTooLong",
        ] {
            assert!(INVALID_MESSAGE_CODES.contains(&bare_code(code)), "{code}");
        }
        assert_eq!(bare_code("RequestThrottled"), "RequestThrottled");
    }

    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(truncate("abc", 5), "abc");
        assert_eq!(truncate("abcdef", 3), "abc… [cut: 6 bytes]");
        assert_eq!(truncate("ééé", 3), "é… [cut: 6 bytes]");
    }
}
