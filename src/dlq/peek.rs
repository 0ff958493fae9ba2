//! Reading a DLQ without consuming it.
//!
//! SQS has no "peek": a message is read by receiving it. A scan receives
//! every message once, holding each invisible for a short while so it is not
//! seen twice, and then makes them all visible again. Nothing is deleted,
//! and a DLQ has no redrive policy of its own, so the extra receives push
//! nothing anywhere.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::{
    MessageAttributeValue, MessageSystemAttributeName as Sys, QueueAttributeName,
};
use serde::Serialize;

use super::{
    ATTR_ATTEMPTS, ATTR_ERROR, ATTR_FAILED_AT, ATTR_SOURCE_QUEUE, DlqError, FailureRecord,
};
use crate::job::JOB_ID_ATTRIBUTE;

/// A message in a DLQ, as received.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadMessage {
    pub message_id: String,
    pub receipt_handle: String,
    pub body: String,
    pub attributes: HashMap<String, MessageAttributeValue>,
    pub system: HashMap<Sys, String>,
}

impl DeadMessage {
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

    pub fn job_id(&self) -> Option<&str> {
        self.attr(JOB_ID_ATTRIBUTE)
    }

    pub fn group_id(&self) -> Option<&str> {
        self.system.get(&Sys::MessageGroupId).map(String::as_str)
    }

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

    pub fn sent_at(&self) -> Option<SystemTime> {
        let ms: u64 = self.system.get(&Sys::SentTimestamp)?.parse().ok()?;
        Some(UNIX_EPOCH + Duration::from_millis(ms))
    }

    /// The key its failure record is stored under.
    pub fn record_key(&self) -> (Option<String>, String) {
        (self.job_id().map(str::to_owned), self.message_id.clone())
    }
}

/// Why a dead letter died, from its failure record and its own attributes
/// (the record wins: it has the whole chain).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Context {
    pub job_id: Option<String>,
    pub message_id: String,
    pub attempts: Option<u32>,
    pub last_error: Option<String>,
    pub error_chain: Vec<String>,
    #[serde(serialize_with = "ser_time")]
    pub failed_at: Option<SystemTime>,
    pub source_queue: Option<String>,
    pub payload_bytes: usize,
}

fn ser_time<S: serde::Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(&humantime::format_rfc3339_millis(*t).to_string()),
        None => s.serialize_none(),
    }
}

impl Context {
    pub fn of(msg: &DeadMessage, record: Option<&FailureRecord>) -> Self {
        let source_from_arn = msg
            .source_arn()
            .and_then(|a| a.rsplit(':').next())
            .map(str::to_owned);
        Self {
            job_id: msg
                .job_id()
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
            source_queue: record
                .map(|r| r.source_queue.clone())
                .filter(|q| !q.is_empty())
                .or_else(|| msg.attr(ATTR_SOURCE_QUEUE).map(str::to_owned))
                .or(source_from_arn),
            payload_bytes: msg.body.len(),
        }
    }

    /// The error and its chain on one line.
    pub fn error_line(&self) -> String {
        let mut parts: Vec<&str> = self.last_error.iter().map(String::as_str).collect();
        parts.extend(self.error_chain.iter().map(String::as_str));
        parts.join(": ").replace(['\n', '\r'], " ")
    }
}

/// Depth as SQS reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Depth {
    pub visible: u64,
    pub in_flight: u64,
    pub delayed: u64,
}

impl Depth {
    pub fn total(&self) -> u64 {
        self.visible + self.in_flight + self.delayed
    }
}

/// Scans one DLQ.
#[derive(Debug, Clone)]
pub struct Peek {
    sqs: aws_sdk_sqs::Client,
    dlq_url: String,
    hold: Duration,
}

impl Peek {
    /// `hold`: how long each received message stays invisible during the
    /// scan; it must outlast the scan, or messages are seen twice (which
    /// the scan notices and skips).
    pub fn new(sqs: aws_sdk_sqs::Client, dlq_url: impl Into<String>, hold: Duration) -> Self {
        Self {
            sqs,
            dlq_url: dlq_url.into(),
            hold,
        }
    }

    pub async fn depth(&self) -> Result<Depth, DlqError> {
        let out = self
            .sqs
            .get_queue_attributes()
            .queue_url(&self.dlq_url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
            .send()
            .await
            .map_err(|e| DlqError::Sqs(DisplayErrorContext(e).to_string()))?;
        let get = |n: QueueAttributeName| {
            out.attributes()
                .and_then(|a| a.get(&n))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        Ok(Depth {
            visible: get(QueueAttributeName::ApproximateNumberOfMessages),
            in_flight: get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
            delayed: get(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
        })
    }

    /// Receives up to 10 messages, held invisible for `hold`.
    pub async fn receive(&self) -> Result<Vec<DeadMessage>, DlqError> {
        let out = self
            .sqs
            .receive_message()
            .queue_url(&self.dlq_url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .visibility_timeout(i32::try_from(self.hold.as_secs()).unwrap_or(43_200).max(1))
            .message_attribute_names("All")
            .message_system_attribute_names(Sys::All)
            .send()
            .await
            .map_err(|e| DlqError::Sqs(DisplayErrorContext(e).to_string()))?;
        Ok(out
            .messages()
            .iter()
            .filter_map(DeadMessage::from_sdk)
            .collect())
    }

    /// Every message of the DLQ once (up to `limit`), in receive order.
    /// Call [`Peek::release`] afterwards to make them visible again.
    pub async fn scan(
        &self,
        limit: Option<usize>,
        mut progress: impl FnMut(usize),
    ) -> Result<Vec<DeadMessage>, DlqError> {
        let mut seen = HashSet::new();
        let mut all = Vec::new();
        let mut empty = 0;
        // Two empty long polls in a row: the queue has nothing visible left.
        while empty < 2 && limit.is_none_or(|l| all.len() < l) {
            let batch = self.receive().await?;
            let fresh: Vec<DeadMessage> = batch
                .into_iter()
                .filter(|m| seen.insert(m.message_id.clone()))
                .collect();
            if fresh.is_empty() {
                empty += 1;
                continue;
            }
            empty = 0;
            all.extend(fresh);
            progress(all.len());
        }
        Ok(all)
    }

    /// Makes messages visible again at once (10 per call). Handles that
    /// expired meanwhile are already visible: nothing to do for them.
    pub async fn release(&self, messages: &[DeadMessage]) {
        let entries: Vec<(&str, &str, Duration)> = messages
            .iter()
            .map(|m| {
                (
                    m.message_id.as_str(),
                    m.receipt_handle.as_str(),
                    Duration::ZERO,
                )
            })
            .collect();
        crate::queue::change_visibility(&self.sqs, &self.dlq_url, &entries).await;
    }

    pub fn dlq_url(&self) -> &str {
        &self.dlq_url
    }

    pub fn sqs(&self) -> &aws_sdk_sqs::Client {
        &self.sqs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::{Failure, FailureKind};

    fn msg(attrs: &[(&str, &str)]) -> DeadMessage {
        DeadMessage {
            message_id: "m-1".into(),
            receipt_handle: "rh".into(),
            body: "{\"a\":1}".into(),
            attributes: attrs
                .iter()
                .map(|(k, v)| {
                    let v = MessageAttributeValue::builder()
                        .data_type("String")
                        .string_value(*v)
                        .build()
                        .unwrap();
                    (k.to_string(), v)
                })
                .collect(),
            system: HashMap::from([
                (Sys::SentTimestamp, "1700000000000".to_string()),
                (
                    Sys::DeadLetterQueueSourceArn,
                    "arn:aws:sqs:us-east-1:1:orders".to_string(),
                ),
            ]),
        }
    }

    #[test]
    fn context_prefers_the_record_and_falls_back_to_attributes() {
        let m = msg(&[
            ("idemq-job-id", "j-1"),
            ("idemq-error", "amount 0 is not positive"),
            ("idemq-attempts", "1"),
            ("idemq-failed-at", "2026-12-01T10:00:00Z"),
        ]);
        let c = Context::of(&m, None);
        assert_eq!(c.job_id.as_deref(), Some("j-1"));
        assert_eq!(c.attempts, Some(1));
        assert_eq!(c.last_error.as_deref(), Some("amount 0 is not positive"));
        assert_eq!(
            c.failed_at,
            humantime::parse_rfc3339("2026-12-01T10:00:00Z").ok()
        );
        assert_eq!(
            c.source_queue.as_deref(),
            Some("orders"),
            "from DeadLetterQueueSourceArn"
        );
        assert_eq!(c.payload_bytes, 7);

        let record = FailureRecord {
            job_id: Some("j-1".into()),
            message_id: "m-0".into(),
            attempt: 6,
            failure: Failure {
                kind: FailureKind::Transient,
                error: "downstream outage".into(),
                chain: vec!["connection\nreset".into()],
            },
            failed_at: UNIX_EPOCH + Duration::from_secs(5),
            source_queue: "ledger".into(),
            payload_hash: "h".into(),
        };
        let c = Context::of(&m, Some(&record));
        assert_eq!(
            (c.attempts, c.source_queue.as_deref()),
            (Some(6), Some("ledger"))
        );
        assert_eq!(c.error_line(), "downstream outage: connection reset");
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["failed_at"], "1970-01-01T00:00:05.000Z");
    }

    #[test]
    fn without_anything_failed_at_is_the_send_time() {
        let c = Context::of(&msg(&[]), None);
        assert_eq!(
            c.failed_at,
            Some(UNIX_EPOCH + Duration::from_millis(1_700_000_000_000))
        );
        assert_eq!(c.job_id, None);
        assert_eq!(c.error_line(), "");
    }
}
