//! Dead letters with context.
//!
//! SQS's native redrive moves a message to the DLQ after maxReceiveCount
//! receives but keeps no trace of *why*. So every failed attempt writes a
//! failure record (job id, attempt, error and its chain, time, source queue,
//! payload hash) to the idemq table, and a message dead-lettered by idemq
//! itself (a permanent failure) also carries that context as attributes.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::types::{MessageAttributeValue, QueueAttributeName};

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

#[derive(Debug, thiserror::Error)]
pub enum DlqError {
    #[error("DynamoDB: {0}")]
    DynamoDb(String),
    #[error("SQS: {0}")]
    Sqs(String),
}

/// Where a queue's dead letters go, read once at cold start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueInfo {
    pub url: String,
    pub name: String,
    pub fifo: bool,
    pub dlq_url: Option<String>,
    pub max_receive_count: Option<u32>,
    pub visibility_timeout: Duration,
    pub retention: Duration,
}

impl QueueInfo {
    /// Reads the queue's `RedrivePolicy` and finds its DLQ.
    pub async fn discover(sqs: &aws_sdk_sqs::Client, url: &str) -> Result<Self, DlqError> {
        let out = sqs
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(QueueAttributeName::All)
            .send()
            .await
            .map_err(|e| DlqError::Sqs(DisplayErrorContext(e).to_string()))?;
        let attrs = out.attributes().cloned().unwrap_or_default();
        let arn = attrs
            .get(&QueueAttributeName::QueueArn)
            .cloned()
            .unwrap_or_default();
        let name = arn
            .rsplit(':')
            .next()
            .filter(|n| !n.is_empty())
            .map_or_else(
                || url.rsplit('/').next().unwrap_or(url).to_owned(),
                str::to_owned,
            );
        let fifo = attrs
            .get(&QueueAttributeName::FifoQueue)
            .is_some_and(|v| v == "true");
        let secs = |name: QueueAttributeName, default: u64| {
            Duration::from_secs(
                attrs
                    .get(&name)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(default),
            )
        };
        // SQS's defaults, should an emulator leave them out.
        let visibility_timeout = secs(QueueAttributeName::VisibilityTimeout, 30);
        let retention = secs(QueueAttributeName::MessageRetentionPeriod, 4 * 24 * 3600);
        let redrive = attrs
            .get(&QueueAttributeName::RedrivePolicy)
            .and_then(|p| serde_json::from_str::<serde_json::Value>(p).ok());
        let (mut dlq_url, mut max_receive_count) = (None, None);
        if let Some(policy) = redrive {
            max_receive_count = match &policy["maxReceiveCount"] {
                serde_json::Value::String(s) => s.parse().ok(),
                v => v.as_u64().and_then(|n| u32::try_from(n).ok()),
            };
            if let Some(target) = policy["deadLetterTargetArn"].as_str() {
                dlq_url = Some(url_of_arn(sqs, target).await?);
            }
        }
        Ok(Self {
            url: url.to_owned(),
            name,
            fifo,
            dlq_url,
            max_receive_count,
            visibility_timeout,
            retention,
        })
    }
}

/// The URL of the queue with this ARN (`arn:aws:sqs:region:account:name`).
pub async fn url_of_arn(sqs: &aws_sdk_sqs::Client, arn: &str) -> Result<String, DlqError> {
    let mut parts = arn.split(':');
    let (account, name) = (parts.nth(4), parts.next());
    let (Some(account), Some(name)) = (account, name) else {
        return Err(DlqError::Sqs(format!("{arn:?} is not an SQS queue ARN")));
    };
    let out = sqs
        .get_queue_url()
        .queue_name(name)
        .queue_owner_aws_account_id(account)
        .send()
        .await
        .map_err(|e| DlqError::Sqs(format!("queue {arn}: {}", DisplayErrorContext(e))))?;
    Ok(out.queue_url().unwrap_or_default().to_owned())
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
