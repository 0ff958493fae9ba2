//! The SQS calls a Lambda batch makes, answered in memory and recorded, so
//! a test can assert what was retried and what was dead-lettered.
//!
//! - `GetQueueUrl`, `GetQueueAttributes`: a source queue with a DLQ
//!   (`RedrivePolicy`) and SQS's default attributes
//!   (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_GetQueueAttributes.html>);
//! - `ChangeMessageVisibility`, `ChangeMessageVisibilityBatch`: a timeout
//!   from 0 to 43,200 s (12 h), on a receipt handle of a message the kit
//!   delivered; 1 to 10 entries with distinct ids, a bad entry failing
//!   alone
//!   (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ChangeMessageVisibilityBatch.html>);
//! - `SendMessage`: a non-empty body, at most 10 message attributes, body
//!   and attributes within the queue's `MaximumMessageSize`, a
//!   `MessageGroupId` on a FIFO queue
//!   (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html>).
//!
//! - `SendMessageBatch` (a follow-up job's send): each entry checked as a
//!   `SendMessage`, a bad entry failing alone in `Failed`
//!   (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessageBatch.html>).
//!
//! Messages are not queued or delivered: the kit hands its events to the
//! handler itself. Any other operation is refused with an error naming it.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use super::error::ServiceError;

/// SQS's longest visibility timeout: 12 hours.
const MAX_VISIBILITY: u64 = 43_200;
/// SQS's defaults
/// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_CreateQueue.html>:
/// `MaximumMessageSize` defaults to 1,048,576 bytes, 1 MiB).
const DEFAULT_VISIBILITY: u64 = 30;
const DEFAULT_RETENTION: u64 = 345_600;
const DEFAULT_MAX_MESSAGE: usize = 1_048_576;
const MAX_ATTRIBUTES: usize = 10;

/// A queue of the in-memory SQS.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueSpec {
    /// The queue's name (a FIFO queue's ends in `.fifo`).
    pub name: String,
    /// `VisibilityTimeout`.
    pub visibility_timeout: Duration,
    /// `MessageRetentionPeriod`.
    pub retention: Duration,
    /// `MaximumMessageSize`: body and attributes of one message.
    pub max_message_bytes: usize,
    /// `RedrivePolicy`: the DLQ's name and `maxReceiveCount`.
    pub redrive: Option<(String, u32)>,
}

impl QueueSpec {
    /// A queue with SQS's defaults (30 s visibility, 4 days' retention,
    /// 1 MiB messages) and no DLQ.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            visibility_timeout: Duration::from_secs(DEFAULT_VISIBILITY),
            retention: Duration::from_secs(DEFAULT_RETENTION),
            max_message_bytes: DEFAULT_MAX_MESSAGE,
            redrive: None,
        }
    }

    /// Redrives to the queue `dlq` after `max_receive_count` receives.
    pub fn with_dlq(mut self, dlq: impl Into<String>, max_receive_count: u32) -> Self {
        self.redrive = Some((dlq.into(), max_receive_count));
        self
    }

    fn fifo(&self) -> bool {
        self.name.ends_with(".fifo")
    }
}

/// A `ChangeMessageVisibility(Batch)` entry SQS accepted: a retry the batch
/// scheduled (or a message handed back untried, timeout 0).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct VisibilityChange {
    /// The queue the message came from.
    pub queue_url: String,
    /// The message whose receipt handle it was.
    pub message_id: String,
    /// The receipt handle the change named.
    pub receipt_handle: String,
    /// The new visibility timeout: the delay before the next attempt.
    pub timeout: Duration,
}

/// A message attribute as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SentAttribute {
    /// `String`, `Number` or `Binary` (with an optional custom suffix).
    pub data_type: String,
    /// The value of a `String` or `Number` attribute.
    pub string_value: Option<String>,
    /// The value of a `Binary` attribute.
    pub binary_value: Option<Vec<u8>>,
}

/// A `SendMessage` SQS accepted: on the kit's queues, a dead letter sent
/// at once (a permanent failure).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SentMessage {
    /// The queue it was sent to.
    pub queue_url: String,
    /// The id SQS gave the new message.
    pub message_id: String,
    /// The body, as sent.
    pub body: String,
    /// The message attributes, by name.
    pub attributes: BTreeMap<String, SentAttribute>,
    /// `MessageGroupId` (FIFO queues).
    pub group_id: Option<String>,
}

impl SentMessage {
    /// A string attribute's value (`idemq-job-id`, `idemq-error`, …).
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes
            .get(name)
            .and_then(|a| a.string_value.as_deref())
    }
}

/// The in-memory SQS: queues, the receipt handles of messages the kit
/// delivered, and what was asked of it.
#[derive(Debug, Clone)]
pub struct MemorySqs {
    region: String,
    account: String,
    queues: BTreeMap<String, QueueSpec>,
    /// Receipt handle -> (queue name, message id).
    deliveries: HashMap<String, (String, String)>,
    visibility: Vec<VisibilityChange>,
    sent: Vec<SentMessage>,
}

impl Default for MemorySqs {
    fn default() -> Self {
        Self::new("us-east-1", "000000000000")
    }
}

fn queue_missing() -> ServiceError {
    ServiceError::sqs("QueueDoesNotExist", "The specified queue does not exist.")
}

impl MemorySqs {
    /// An SQS of `region` and `account` (queue URLs and ARNs use them).
    pub fn new(region: impl Into<String>, account: impl Into<String>) -> Self {
        Self {
            region: region.into(),
            account: account.into(),
            queues: BTreeMap::new(),
            deliveries: HashMap::new(),
            visibility: Vec::new(),
            sent: Vec::new(),
        }
    }

    /// Creates (or replaces) a queue.
    pub fn create_queue(&mut self, spec: QueueSpec) {
        self.queues.insert(spec.name.clone(), spec);
    }

    /// Whether no queue exists yet.
    pub(crate) fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// Whether the queue exists.
    pub fn has_queue(&self, name: &str) -> bool {
        self.queues.contains_key(name)
    }

    /// The URL of a queue of this SQS.
    pub fn url(&self, name: &str) -> String {
        format!(
            "https://sqs.{}.amazonaws.com/{}/{name}",
            self.region, self.account
        )
    }

    /// The ARN of a queue of this SQS.
    pub fn arn(&self, name: &str) -> String {
        format!("arn:aws:sqs:{}:{}:{name}", self.region, self.account)
    }

    /// Records that the message `message_id` was delivered with
    /// `receipt_handle` from `queue`, so visibility changes can name it.
    pub fn delivered(&mut self, queue: &str, message_id: &str, receipt_handle: &str) {
        self.deliveries.insert(
            receipt_handle.to_owned(),
            (queue.to_owned(), message_id.to_owned()),
        );
    }

    /// Every visibility change SQS accepted, in order.
    pub fn visibility_changes(&self) -> &[VisibilityChange] {
        &self.visibility
    }

    /// Every message SQS accepted from `SendMessage`, in order.
    pub fn sent_messages(&self) -> &[SentMessage] {
        &self.sent
    }

    /// The queue a request's `QueueUrl` names.
    fn queue_of(&self, req: &Value) -> Result<&QueueSpec, ServiceError> {
        let url = req["QueueUrl"]
            .as_str()
            .ok_or_else(|| ServiceError::sqs("MissingParameter", "QueueUrl is required"))?;
        let name = url.rsplit('/').next().unwrap_or_default();
        match self.queues.get(name) {
            Some(q) if self.url(name) == url => Ok(q),
            _ => Err(queue_missing()),
        }
    }

    /// Answers one request in its wire form (the JSON body of
    /// `AmazonSQS.<operation>`).
    pub fn apply(&mut self, operation: &str, req: &Value) -> Result<Value, ServiceError> {
        match operation {
            "GetQueueUrl" => {
                let name = req["QueueName"].as_str().unwrap_or_default();
                let owner = req["QueueOwnerAWSAccountId"].as_str();
                if owner.is_some_and(|o| o != self.account) || !self.queues.contains_key(name) {
                    return Err(queue_missing());
                }
                Ok(json!({ "QueueUrl": self.url(name) }))
            }
            "GetQueueAttributes" => self.attributes(req),
            "ChangeMessageVisibility" => {
                let queue = self.queue_of(req)?.name.clone();
                let handle = req["ReceiptHandle"].as_str().unwrap_or_default();
                let timeout = &req["VisibilityTimeout"];
                self.change(&queue, handle, timeout)
                    .map(|()| json!({}))
                    .map_err(|(code, m)| ServiceError::sqs(code, m))
            }
            "ChangeMessageVisibilityBatch" => self.change_batch(req),
            "SendMessage" => self.send(req),
            "SendMessageBatch" => self.send_batch(req),
            other => Err(ServiceError::sqs(
                "UnsupportedOperation",
                format!("idemq::testing does not model the SQS operation {other}"),
            )),
        }
    }

    fn attributes(&self, req: &Value) -> Result<Value, ServiceError> {
        let q = self.queue_of(req)?;
        let mut all = BTreeMap::from([
            ("QueueArn", self.arn(&q.name)),
            (
                "VisibilityTimeout",
                q.visibility_timeout.as_secs().to_string(),
            ),
            ("MessageRetentionPeriod", q.retention.as_secs().to_string()),
            ("MaximumMessageSize", q.max_message_bytes.to_string()),
            ("DelaySeconds", "0".into()),
            ("ReceiveMessageWaitTimeSeconds", "0".into()),
        ]);
        if q.fifo() {
            all.insert("FifoQueue", "true".into());
        }
        if let Some((dlq, max)) = &q.redrive {
            all.insert(
                "RedrivePolicy",
                json!({"deadLetterTargetArn": self.arn(dlq), "maxReceiveCount": max}).to_string(),
            );
        }
        let wanted: Vec<&str> = req["AttributeNames"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut out = serde_json::Map::new();
        for name in &wanted {
            if *name == "All" {
                for (k, v) in &all {
                    out.insert((*k).to_owned(), Value::String(v.clone()));
                }
            } else if let Some(v) = all.get(name) {
                out.insert((*name).to_owned(), Value::String(v.clone()));
            } else if !matches!(*name, "FifoQueue" | "RedrivePolicy") {
                return Err(ServiceError::sqs(
                    "InvalidAttributeName",
                    format!("idemq::testing does not model the queue attribute {name}"),
                ));
            }
        }
        Ok(json!({ "Attributes": out }))
    }

    /// One visibility change; `Err((code, message))` as SQS would refuse it.
    fn change(
        &mut self,
        queue: &str,
        handle: &str,
        timeout: &Value,
    ) -> Result<(), (&'static str, String)> {
        let secs = timeout
            .as_u64()
            .filter(|s| *s <= MAX_VISIBILITY)
            .ok_or_else(|| {
                (
                    "InvalidParameterValue",
                    format!(
                        "Value {timeout} for parameter VisibilityTimeout is invalid. Reason: Must be between 0 and 43200."
                    ),
                )
            })?;
        let Some((q, message_id)) = self.deliveries.get(handle).filter(|(q, _)| q == queue) else {
            return Err((
                "ReceiptHandleIsInvalid",
                format!("The receipt handle {handle:?} is not one the kit delivered from {queue}"),
            ));
        };
        self.visibility.push(VisibilityChange {
            queue_url: self.url(q),
            message_id: message_id.clone(),
            receipt_handle: handle.to_owned(),
            timeout: Duration::from_secs(secs),
        });
        Ok(())
    }

    fn change_batch(&mut self, req: &Value) -> Result<Value, ServiceError> {
        let queue = self.queue_of(req)?.name.clone();
        let entries = req["Entries"].as_array().cloned().unwrap_or_default();
        if entries.is_empty() {
            return Err(ServiceError::sqs(
                "EmptyBatchRequest",
                "There should be at least one ChangeMessageVisibilityBatchRequestEntry in the request.",
            ));
        }
        if entries.len() > 10 {
            return Err(ServiceError::sqs(
                "TooManyEntriesInBatchRequest",
                format!(
                    "Maximum number of entries per request are 10. You have sent {}.",
                    entries.len()
                ),
            ));
        }
        let ids: Vec<&str> = entries
            .iter()
            .map(|e| e["Id"].as_str().unwrap_or_default())
            .collect();
        if (1..ids.len()).any(|i| ids[..i].contains(&ids[i])) {
            return Err(ServiceError::sqs(
                "BatchEntryIdsNotDistinct",
                "Two or more batch entries in the request have the same Id.",
            ));
        }
        let (mut ok, mut failed) = (Vec::new(), Vec::new());
        for (e, id) in entries.iter().zip(ids) {
            let handle = e["ReceiptHandle"].as_str().unwrap_or_default();
            match self.change(&queue, handle, &e["VisibilityTimeout"]) {
                Ok(()) => ok.push(json!({ "Id": id })),
                Err((code, message)) => failed
                    .push(json!({"Id": id, "SenderFault": true, "Code": code, "Message": message})),
            }
        }
        Ok(json!({ "Successful": ok, "Failed": failed }))
    }

    /// Each entry as a `SendMessage` of its own (the queue checked first:
    /// a missing queue fails the whole call).
    fn send_batch(&mut self, req: &Value) -> Result<Value, ServiceError> {
        self.queue_of(req)?;
        let (mut ok, mut failed) = (Vec::new(), Vec::new());
        for entry in req["Entries"].as_array().into_iter().flatten() {
            let id = entry["Id"].clone();
            let mut one = entry.clone();
            one["QueueUrl"] = req["QueueUrl"].clone();
            match self.send(&one) {
                Ok(sent) => ok.push(json!({
                    "Id": id,
                    "MessageId": sent["MessageId"],
                    "MD5OfMessageBody": "",
                })),
                Err(e) => failed.push(json!({
                    "Id": id, "SenderFault": true, "Code": e.code(), "Message": e.message(),
                })),
            }
        }
        Ok(json!({ "Successful": ok, "Failed": failed }))
    }

    fn send(&mut self, req: &Value) -> Result<Value, ServiceError> {
        let q = self.queue_of(req)?;
        let invalid = |m: String| ServiceError::sqs("InvalidParameterValue", m);
        let body = req["MessageBody"].as_str().unwrap_or_default();
        if body.is_empty() {
            return Err(ServiceError::sqs(
                "MissingParameter",
                "The request must contain the parameter MessageBody.",
            ));
        }
        let group_id = req["MessageGroupId"].as_str().map(str::to_owned);
        if q.fifo() && group_id.is_none() {
            return Err(ServiceError::sqs(
                "MissingParameter",
                "The request must contain the parameter MessageGroupId.",
            ));
        }
        let mut attributes = BTreeMap::new();
        let mut bytes = body.len();
        if let Some(map) = req["MessageAttributes"].as_object() {
            if map.len() > MAX_ATTRIBUTES {
                return Err(invalid(format!(
                    "Number of message attributes [{}] exceeds the allowed maximum [{MAX_ATTRIBUTES}].",
                    map.len()
                )));
            }
            for (name, a) in map {
                let data_type = a["DataType"].as_str().unwrap_or_default().to_owned();
                let string_value = a["StringValue"].as_str().map(str::to_owned);
                let binary_value = match a["BinaryValue"].as_str() {
                    Some(b) => Some(STANDARD.decode(b).map_err(|_| {
                        invalid(format!(
                            "The binary value of message attribute {name} is not base64"
                        ))
                    })?),
                    None => None,
                };
                if data_type.is_empty() || (string_value.is_none() && binary_value.is_none()) {
                    return Err(invalid(format!(
                        "The message attribute '{name}' must contain a non-empty value of message attribute type '{data_type}'."
                    )));
                }
                bytes += name.len()
                    + data_type.len()
                    + string_value.as_ref().map_or(0, String::len)
                    + binary_value.as_ref().map_or(0, Vec::len);
                attributes.insert(
                    name.clone(),
                    SentAttribute {
                        data_type,
                        string_value,
                        binary_value,
                    },
                );
            }
        }
        if bytes > q.max_message_bytes {
            return Err(invalid(format!(
                "One or more parameters are invalid. Reason: Message must be shorter than {} bytes.",
                q.max_message_bytes
            )));
        }
        let queue_url = self.url(&q.name);
        let message_id = format!("sent-{:08}", self.sent.len() + 1);
        self.sent.push(SentMessage {
            queue_url,
            message_id: message_id.clone(),
            body: body.to_owned(),
            attributes,
            group_id,
        });
        Ok(json!({ "MessageId": message_id }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqs() -> MemorySqs {
        let mut s = MemorySqs::default();
        s.create_queue(QueueSpec::new("jobs").with_dlq("jobs-dlq", 3));
        s.create_queue(QueueSpec::new("jobs-dlq"));
        s.delivered("jobs", "m1", "rh1");
        s
    }

    #[test]
    fn queue_url_and_attributes_with_the_redrive_policy() {
        let mut s = sqs();
        let url = s
            .apply(
                "GetQueueUrl",
                &json!({"QueueName": "jobs", "QueueOwnerAWSAccountId": "000000000000"}),
            )
            .unwrap();
        assert_eq!(url["QueueUrl"], s.url("jobs"));
        assert_eq!(
            s.apply("GetQueueUrl", &json!({"QueueName": "nope"}))
                .unwrap_err()
                .code(),
            "QueueDoesNotExist"
        );
        let attrs = s
            .apply(
                "GetQueueAttributes",
                &json!({"QueueUrl": s.url("jobs"), "AttributeNames": ["All"]}),
            )
            .unwrap();
        let policy: Value =
            serde_json::from_str(attrs["Attributes"]["RedrivePolicy"].as_str().unwrap()).unwrap();
        assert_eq!(policy["maxReceiveCount"], 3);
        assert_eq!(policy["deadLetterTargetArn"], s.arn("jobs-dlq"));
        assert_eq!(attrs["Attributes"]["VisibilityTimeout"], "30");
    }

    #[test]
    fn visibility_changes_are_checked_and_recorded() {
        let mut s = sqs();
        let req = json!({"QueueUrl": s.url("jobs"), "Entries": [
            {"Id": "0", "ReceiptHandle": "rh1", "VisibilityTimeout": 7},
            {"Id": "1", "ReceiptHandle": "unknown", "VisibilityTimeout": 7},
            {"Id": "2", "ReceiptHandle": "rh1", "VisibilityTimeout": 43201}
        ]});
        let out = s.apply("ChangeMessageVisibilityBatch", &req).unwrap();
        assert_eq!(out["Successful"].as_array().unwrap().len(), 1);
        assert_eq!(out["Failed"][0]["Code"], "ReceiptHandleIsInvalid");
        assert_eq!(out["Failed"][1]["Code"], "InvalidParameterValue");
        assert_eq!(s.visibility_changes().len(), 1);
        assert_eq!(s.visibility_changes()[0].message_id, "m1");
        assert_eq!(s.visibility_changes()[0].timeout, Duration::from_secs(7));
        let dup = json!({"QueueUrl": s.url("jobs"), "Entries": [{"Id": "a", "ReceiptHandle": "rh1", "VisibilityTimeout": 1}, {"Id": "a", "ReceiptHandle": "rh1", "VisibilityTimeout": 1}]});
        assert_eq!(
            s.apply("ChangeMessageVisibilityBatch", &dup)
                .unwrap_err()
                .code(),
            "BatchEntryIdsNotDistinct"
        );
    }

    #[test]
    fn sends_are_checked_and_recorded() {
        let mut s = sqs();
        let url = s.url("jobs-dlq");
        let ok = json!({"QueueUrl": url, "MessageBody": "{}", "MessageAttributes": {"idemq-job-id": {"DataType": "String", "StringValue": "j1"}}});
        s.apply("SendMessage", &ok).unwrap();
        assert_eq!(s.sent_messages()[0].attribute("idemq-job-id"), Some("j1"));
        let empty = json!({"QueueUrl": url, "MessageBody": ""});
        assert_eq!(
            s.apply("SendMessage", &empty).unwrap_err().code(),
            "MissingParameter"
        );
        let attrs: serde_json::Map<String, Value> = (0..11)
            .map(|i| {
                (
                    format!("a{i}"),
                    json!({"DataType": "String", "StringValue": "v"}),
                )
            })
            .collect();
        let many = json!({"QueueUrl": url, "MessageBody": "x", "MessageAttributes": attrs});
        assert_eq!(
            s.apply("SendMessage", &many).unwrap_err().code(),
            "InvalidParameterValue"
        );
        let big = json!({"QueueUrl": url, "MessageBody": "x".repeat(DEFAULT_MAX_MESSAGE + 1)});
        assert!(
            s.apply("SendMessage", &big)
                .unwrap_err()
                .message()
                .contains("shorter than")
        );
        assert_eq!(
            s.apply("DeleteMessage", &json!({})).unwrap_err().code(),
            "UnsupportedOperation"
        );
        assert_eq!(s.sent_messages().len(), 1);
    }
}
