//! Failure records and the context attributes of idemq's own dead letters.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::types::MessageAttributeValue;

use super::DlqError;
use crate::classify::Failure;
use crate::config::TableLayout;

pub const ATTR_ERROR: &str = "idemq-error";
pub const ATTR_ATTEMPTS: &str = "idemq-attempts";
pub const ATTR_FAILED_AT: &str = "idemq-failed-at";
pub const ATTR_SOURCE_QUEUE: &str = "idemq-source-queue";
/// SQS's limit on message attributes per message.
pub const MAX_MESSAGE_ATTRIBUTES: usize = 10;
/// Longest error text put in an attribute; the record keeps the whole chain.
const MAX_ERROR_ATTRIBUTE: usize = 1024;

/// One failed attempt, as stored under `idemq#failure#<job id>` (the latest
/// attempt overwrites the one before, so the record says how the job last
/// failed and how many times).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureRecord {
    /// The job id, or `None` when the message had no valid one.
    pub job_id: Option<String>,
    pub message_id: String,
    pub attempt: u32,
    pub failure: Failure,
    pub failed_at: SystemTime,
    pub source_queue: String,
    pub payload_hash: String,
}

/// Writes failure records and sends permanent failures to the DLQ.
#[derive(Debug, Clone)]
pub struct DeadLetters {
    ddb: aws_sdk_dynamodb::Client,
    sqs: aws_sdk_sqs::Client,
    layout: TableLayout,
    ttl: Duration,
}

impl DeadLetters {
    pub fn new(
        ddb: aws_sdk_dynamodb::Client,
        sqs: aws_sdk_sqs::Client,
        layout: TableLayout,
        ttl: Duration,
    ) -> Self {
        Self {
            ddb,
            sqs,
            layout,
            ttl,
        }
    }

    fn record_key(&self, job_id: Option<&str>, message_id: &str) -> String {
        match job_id {
            Some(id) => format!("{}failure#{id}", self.layout.key_prefix),
            None => format!("{}failure-message#{message_id}", self.layout.key_prefix),
        }
    }

    /// Stores `rec` (one `PutItem`; only failures pay for it).
    pub async fn record(&self, rec: &FailureRecord) -> Result<(), DlqError> {
        let expires = (rec.failed_at + self.ttl)
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let s = |v: &str| AttributeValue::S(v.to_owned());
        let mut item = HashMap::from([
            (
                self.layout.partition_key.clone(),
                s(&self.record_key(rec.job_id.as_deref(), &rec.message_id)),
            ),
            ("message_id".into(), s(&rec.message_id)),
            ("attempt".into(), AttributeValue::N(rec.attempt.to_string())),
            ("kind".into(), s(rec.failure.kind.as_str())),
            ("error".into(), s(&rec.failure.error)),
            ("failed_at".into(), s(&rfc3339(rec.failed_at))),
            ("source_queue".into(), s(&rec.source_queue)),
            (self.layout.payload_hash.clone(), s(&rec.payload_hash)),
            (
                self.layout.expires_at.clone(),
                AttributeValue::N(expires.to_string()),
            ),
        ]);
        if let Some(id) = &rec.job_id {
            item.insert(self.layout.job_id.clone(), s(id));
        }
        if !rec.failure.chain.is_empty() {
            item.insert(
                "error_chain".into(),
                AttributeValue::L(rec.failure.chain.iter().map(|c| s(c)).collect()),
            );
        }
        self.ddb
            .put_item()
            .table_name(&self.layout.table_name)
            .set_item(Some(item))
            .send()
            .await
            .map_err(|e| DlqError::DynamoDb(DisplayErrorContext(e).to_string()))?;
        Ok(())
    }

    /// Reads the failure record of a job (or, with `job_id` `None`, of a
    /// message without a valid job id).
    pub async fn read(
        &self,
        job_id: Option<&str>,
        message_id: &str,
    ) -> Result<Option<FailureRecord>, DlqError> {
        let out = self
            .ddb
            .get_item()
            .table_name(&self.layout.table_name)
            .key(
                &self.layout.partition_key,
                AttributeValue::S(self.record_key(job_id, message_id)),
            )
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| DlqError::DynamoDb(DisplayErrorContext(e).to_string()))?;
        Ok(out.item().map(|item| self.parse(item)))
    }

    /// Reads the failure records of many dead letters, 100 keys per
    /// `BatchGetItem`. Keyed by `(job id, message id)` as given.
    pub async fn read_many(
        &self,
        wanted: &[(Option<String>, String)],
    ) -> Result<HashMap<(Option<String>, String), FailureRecord>, DlqError> {
        let pk = &self.layout.partition_key;
        let mut by_key: HashMap<String, Vec<(Option<String>, String)>> = HashMap::new();
        for (job, msg) in wanted {
            by_key
                .entry(self.record_key(job.as_deref(), msg))
                .or_default()
                .push((job.clone(), msg.clone()));
        }
        let keys: Vec<String> = by_key.keys().cloned().collect();
        let mut found = HashMap::new();
        for chunk in keys.chunks(100) {
            let mut pending: Vec<HashMap<String, AttributeValue>> = chunk
                .iter()
                .map(|k| HashMap::from([(pk.clone(), AttributeValue::S(k.clone()))]))
                .collect();
            // DynamoDB may leave keys unprocessed under load: ask again.
            for attempt in 0..8u32 {
                if pending.is_empty() {
                    break;
                }
                if attempt > 0 {
                    tokio::time::sleep(Duration::from_millis(50 << attempt.min(5))).await;
                }
                let request = aws_sdk_dynamodb::types::KeysAndAttributes::builder()
                    .set_keys(Some(std::mem::take(&mut pending)))
                    .consistent_read(true)
                    .build()
                    .map_err(|e| DlqError::DynamoDb(e.to_string()))?;
                let out = self
                    .ddb
                    .batch_get_item()
                    .request_items(&self.layout.table_name, request)
                    .send()
                    .await
                    .map_err(|e| DlqError::DynamoDb(DisplayErrorContext(e).to_string()))?;
                for item in out
                    .responses()
                    .and_then(|r| r.get(&self.layout.table_name))
                    .into_iter()
                    .flatten()
                {
                    let Some(key) = item.get(pk).and_then(|v| v.as_s().ok()) else {
                        continue;
                    };
                    for wanted in by_key.get(key).into_iter().flatten() {
                        found.insert(wanted.clone(), self.parse(item));
                    }
                }
                pending = out
                    .unprocessed_keys()
                    .and_then(|u| u.get(&self.layout.table_name))
                    .map(|k| k.keys().to_vec())
                    .unwrap_or_default();
            }
            if !pending.is_empty() {
                return Err(DlqError::DynamoDb(format!(
                    "{} failure records stayed unprocessed after 8 tries",
                    pending.len()
                )));
            }
        }
        Ok(found)
    }

    fn parse(&self, item: &HashMap<String, AttributeValue>) -> FailureRecord {
        let s = |k: &str| {
            item.get(k)
                .and_then(|v| v.as_s().ok())
                .cloned()
                .unwrap_or_default()
        };
        let kind = match s("kind").as_str() {
            "permanent" => crate::classify::FailureKind::Permanent,
            "conflict" => crate::classify::FailureKind::Conflict,
            "rejected" => crate::classify::FailureKind::Rejected,
            "panic" => crate::classify::FailureKind::Panic,
            "timeout" => crate::classify::FailureKind::Timeout,
            _ => crate::classify::FailureKind::Transient,
        };
        let chain = item
            .get("error_chain")
            .and_then(|v| v.as_l().ok())
            .map(|l| l.iter().filter_map(|v| v.as_s().ok().cloned()).collect())
            .unwrap_or_default();
        FailureRecord {
            job_id: item
                .get(&self.layout.job_id)
                .and_then(|v| v.as_s().ok())
                .cloned(),
            message_id: s("message_id"),
            attempt: item
                .get("attempt")
                .and_then(|v| v.as_n().ok())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0),
            failure: Failure {
                kind,
                error: s("error"),
                chain,
            },
            failed_at: humantime::parse_rfc3339(&s("failed_at")).unwrap_or(UNIX_EPOCH),
            source_queue: s("source_queue"),
            payload_hash: s(&self.layout.payload_hash),
        }
    }

    /// Sends a message to the DLQ now, with its body, its attributes and
    /// the failure's context as `idemq-*` attributes. When the original
    /// attributes leave no room under SQS's limit of 10, the context is
    /// left out of the message (the failure record still has it) rather than
    /// dropping one of the producer's attributes.
    pub async fn send(
        &self,
        dlq_url: &str,
        message: &DeadLetter<'_>,
        rec: &FailureRecord,
    ) -> Result<(), DlqError> {
        let mut attrs = message.attributes.clone();
        let context = [
            (
                ATTR_ERROR,
                truncate(&rec.failure.full(), MAX_ERROR_ATTRIBUTE),
            ),
            (ATTR_ATTEMPTS, rec.attempt.to_string()),
            (ATTR_FAILED_AT, rfc3339(rec.failed_at)),
            (ATTR_SOURCE_QUEUE, rec.source_queue.clone()),
        ];
        let room = attrs.len() + context.len() <= MAX_MESSAGE_ATTRIBUTES;
        if room {
            for (name, value) in context {
                let v = MessageAttributeValue::builder()
                    .data_type(if name == ATTR_ATTEMPTS {
                        "Number"
                    } else {
                        "String"
                    })
                    .string_value(value)
                    .build()
                    .map_err(|e| DlqError::Sqs(e.to_string()))?;
                attrs.insert(name.to_owned(), v);
            }
        } else {
            tracing::warn!(
                message_id = rec.message_id,
                "message has {} attributes; its dead-letter context is in the failure record only",
                attrs.len()
            );
        }
        let mut send = self
            .sqs
            .send_message()
            .queue_url(dlq_url)
            .message_body(message.body)
            .set_message_attributes(Some(attrs));
        if let Some(group) = message.group_id {
            // The message id is unique per message: a retried send of the
            // same dead letter is dropped by FIFO dedup, not stored twice.
            send = send
                .message_group_id(group)
                .message_deduplication_id(&rec.message_id);
        }
        send.send()
            .await
            .map_err(|e| DlqError::Sqs(DisplayErrorContext(e).to_string()))?;
        Ok(())
    }
}

/// What `DeadLetters::send` needs of the original message.
#[derive(Debug, Clone)]
pub struct DeadLetter<'a> {
    pub body: &'a str,
    pub attributes: &'a HashMap<String, MessageAttributeValue>,
    pub group_id: Option<&'a str>,
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(truncate("abc", 5), "abc");
        assert_eq!(truncate("abcdef", 3), "abc…");
        assert_eq!(truncate("ééé", 3), "é…");
    }
}
