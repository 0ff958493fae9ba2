//! Publishing jobs to an SNS topic (feature `sns`), each with a stable id.
//!
//! A topic fans a job out to every subscribed queue. With raw message
//! delivery off, each queue receives an SNS notification whose
//! `MessageAttributes` carry what the publish set
//! (<https://docs.aws.amazon.com/sns/latest/dg/sns-large-payload-raw-message-delivery.html>):
//! [`TopicProducer`] sets `idemq-job-id` there, so a consumer with
//! `IDEMQ_ENVELOPE=sns` ([`crate::envelope`]) knows a re-publish of the
//! same job for the duplicate it is, although SNS gives it a new
//! `MessageId`, `Timestamp` and `Signature`.

use std::collections::HashMap;

use aws_sdk_sns::error::DisplayErrorContext;
use aws_sdk_sns::primitives::Blob;
use aws_sdk_sns::types::{MessageAttributeValue, PublishBatchRequestEntry};
use serde::Serialize;

use crate::job::{JOB_ID_ATTRIBUTE, JobId};
use crate::producer::{
    EntryAnswer, INVALID_MESSAGE_CODES, Job, MAX_ATTRIBUTES, SendError, attributes_with_job_id,
    deduplication_id, send_batch_with_retries, send_in_batches,
};

/// SNS's default largest message, and the most one `PublishBatch` carries
/// in all (256 KiB, body and attributes; a topic's `MaximumMessageSize`
/// can raise both:
/// <https://docs.aws.amazon.com/sns/latest/api/API_PublishBatch.html>).
/// The SNS envelope around it adds about 1.5 KB, which the subscribed
/// queue's own `MaximumMessageSize` must also take.
pub const DEFAULT_MAX_PUBLISH_BYTES: usize = 256 * 1024;
/// Error codes with which SNS refuses an entry itself: retrying it cannot
/// pass.
const INVALID_ENTRY_CODES: [&str; 3] = [
    "InvalidParameter",
    "InvalidParameterValue",
    "BatchEntryIdsNotDistinct",
];

/// Publishes jobs to one SNS topic, each with the `idemq-job-id` message
/// attribute set to its id (and, on a FIFO topic, its group and a
/// deduplication id derived from that id).
///
/// ```no_run
/// # async fn demo(sdk: &aws_config::SdkConfig) -> Result<(), idemq::producer::SendError> {
/// let topic = idemq::topic::TopicProducer::new(sdk, "arn:aws:sns:eu-west-1:123456789012:transfers");
/// // Published twice (a retry after a timeout): one job to every consumer
/// // whose queue is subscribed and that runs with IDEMQ_ENVELOPE=sns.
/// for _ in 0..2 {
///     topic.send("t-1", &serde_json::json!({"transfer_id": "t-1", "amount": 5})).await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct TopicProducer {
    sns: aws_sdk_sns::Client,
    topic_arn: String,
    fifo: bool,
    max_message_bytes: usize,
}

impl TopicProducer {
    /// A producer for the topic `topic_arn`, with a client from `sdk`.
    pub fn new(sdk: &aws_config::SdkConfig, topic_arn: impl Into<String>) -> Self {
        Self::with_client(aws_sdk_sns::Client::new(sdk), topic_arn)
    }

    /// A FIFO topic is known by its name (it must end in `.fifo`).
    pub fn with_client(sns: aws_sdk_sns::Client, topic_arn: impl Into<String>) -> Self {
        let topic_arn = topic_arn.into();
        Self {
            fifo: topic_arn.ends_with(".fifo"),
            sns,
            topic_arn,
            max_message_bytes: DEFAULT_MAX_PUBLISH_BYTES,
        }
    }

    /// For a topic whose `MaximumMessageSize` was raised above 256 KiB.
    pub fn with_max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes;
        self
    }

    /// The topic published to.
    pub fn topic_arn(&self) -> &str {
        &self.topic_arn
    }

    /// Whether the topic is FIFO (its name ends in `.fifo`).
    pub fn is_fifo(&self) -> bool {
        self.fifo
    }

    /// Publishes one job whose body is `payload` as JSON. Returns its SNS
    /// message id.
    pub async fn send<T: Serialize + ?Sized>(
        &self,
        job_id: &str,
        payload: &T,
    ) -> Result<String, SendError> {
        self.send_job(Job::new(job_id, payload)?).await
    }

    /// Publishes one job. Returns its SNS message id.
    pub async fn send_job(&self, job: Job) -> Result<String, SendError> {
        self.send_batch(vec![job]).await.remove(0).1
    }

    /// Publishes jobs in `PublishBatch` calls (at most 10 entries and the
    /// size limit per call), retrying only the entries that failed for a
    /// reason that can pass, with backoff. One result per job, in input
    /// order; a job that cannot be published is refused before any request.
    pub async fn send_batch(&self, jobs: Vec<Job>) -> Vec<(String, Result<String, SendError>)> {
        let results = send_in_batches(
            &jobs,
            |j| self.check(j),
            self.max_message_bytes,
            self.fifo,
            |batch| self.publish_with_retries(&jobs, batch),
        )
        .await;
        jobs.into_iter().map(|j| j.id).zip(results).collect()
    }

    /// Everything SNS would refuse that can be known before publishing.
    fn check(&self, job: &Job) -> Result<(), SendError> {
        let job_id = || job.id.clone();
        JobId::new(job.id.as_str()).map_err(|source| SendError::InvalidJobId {
            job_id: job_id(),
            source,
        })?;
        // SNS takes more attributes than SQS, but a subscribed queue with
        // raw delivery on would take only SQS's 10: keep to those.
        let count = attributes_with_job_id(job.attributes.keys());
        if count > MAX_ATTRIBUTES {
            return Err(SendError::TooManyAttributes {
                job_id: job_id(),
                count,
            });
        }
        if job.size() > self.max_message_bytes {
            return Err(SendError::TooLarge {
                job_id: job_id(),
                bytes: job.size(),
                limit: self.max_message_bytes,
            });
        }
        if self.fifo && job.group_id.is_none() {
            return Err(SendError::MissingGroup { job_id: job_id() });
        }
        Ok(())
    }

    fn entry(&self, i: usize, job: &Job) -> Result<PublishBatchRequestEntry, String> {
        let mut attributes: HashMap<String, MessageAttributeValue> = HashMap::new();
        for (name, v) in &job.attributes {
            let mut a = MessageAttributeValue::builder()
                .data_type(v.data_type())
                .set_string_value(v.string_value().map(str::to_owned));
            if let Some(b) = v.binary_value() {
                a = a.binary_value(Blob::new(b.as_ref().to_vec()));
            }
            attributes.insert(name.clone(), a.build().map_err(|e| e.to_string())?);
        }
        let id_attr = MessageAttributeValue::builder()
            .data_type("String")
            .string_value(&job.id)
            .build()
            .map_err(|e| e.to_string())?;
        attributes.insert(JOB_ID_ATTRIBUTE.to_owned(), id_attr);
        let mut e = PublishBatchRequestEntry::builder()
            .id(i.to_string())
            .message(&job.body)
            .set_message_attributes(Some(attributes))
            .set_message_group_id(job.group_id.clone());
        if self.fifo {
            let dedup = job
                .deduplication_id
                .clone()
                .unwrap_or_else(|| deduplication_id(&job.id));
            e = e.message_deduplication_id(dedup);
        }
        e.build().map_err(|e| e.to_string())
    }

    async fn publish_with_retries(
        &self,
        jobs: &[Job],
        batch: Vec<usize>,
    ) -> Vec<(usize, Result<String, SendError>)> {
        let call = |entries| async move {
            let out = self
                .sns
                .publish_batch()
                .topic_arn(&self.topic_arn)
                .set_publish_batch_request_entries(Some(entries))
                .send()
                .await
                .map_err(|e| DisplayErrorContext(e).to_string())?;
            // A success without an id names no entry: it is answered by
            // nothing, so that entry is retried like an unanswered one.
            let sent = out.successful().iter().map(|ok| EntryAnswer::Sent {
                id: ok.id().unwrap_or_default().to_owned(),
                message_id: ok.message_id().unwrap_or_default().to_owned(),
            });
            let failed = out.failed().iter().map(|f| EntryAnswer::Failed {
                id: f.id().to_owned(),
                code: f.code().to_owned(),
                message: f.message().unwrap_or("").to_owned(),
                refused: f.sender_fault()
                    || INVALID_ENTRY_CODES.contains(&f.code())
                    || INVALID_MESSAGE_CODES.contains(&f.code()),
            });
            Ok(sent.chain(failed).collect())
        };
        send_batch_with_retries("PublishBatch", jobs, batch, |i, j| self.entry(i, j), call).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(arn: &str) -> TopicProducer {
        let conf = aws_sdk_sns::Config::builder()
            .behavior_version(aws_sdk_sns::config::BehaviorVersion::latest())
            .region(aws_sdk_sns::config::Region::new("us-east-1"))
            .build();
        TopicProducer::with_client(aws_sdk_sns::Client::from_conf(conf), arn)
    }

    #[test]
    fn entries_carry_the_job_id_attribute_and_fifo_fields() {
        let t = topic("arn:aws:sns:us-east-1:1:jobs");
        assert!(!t.is_fifo());
        let mut job = Job::raw("t-1", r#"{"a":1}"#);
        let other = aws_sdk_sqs::types::MessageAttributeValue::builder()
            .data_type("Binary")
            .binary_value(aws_sdk_sqs::primitives::Blob::new(vec![0u8, 1]))
            .build()
            .unwrap();
        job.attributes.insert("raw".into(), other);
        // A stale id attribute is replaced by the job's own.
        let stale = aws_sdk_sqs::types::MessageAttributeValue::builder()
            .data_type("String")
            .string_value("old")
            .build()
            .unwrap();
        job.attributes.insert(JOB_ID_ATTRIBUTE.into(), stale);
        let e = t.entry(3, &job).unwrap();
        assert_eq!(e.id(), "3");
        assert_eq!(e.message(), r#"{"a":1}"#);
        let attrs = e.message_attributes().unwrap();
        assert_eq!(attrs[JOB_ID_ATTRIBUTE].string_value(), Some("t-1"));
        assert_eq!(attrs[JOB_ID_ATTRIBUTE].data_type(), "String");
        assert_eq!(attrs["raw"].binary_value().unwrap().as_ref(), &[0u8, 1]);
        assert_eq!(e.message_deduplication_id(), None);

        let f = topic("arn:aws:sns:us-east-1:1:jobs.fifo");
        assert!(f.is_fifo());
        assert!(matches!(
            f.check(&Job::raw("t-2", "{}")),
            Err(SendError::MissingGroup { .. })
        ));
        let e = f.entry(0, &Job::raw("t-2", "{}").in_group("g")).unwrap();
        assert_eq!(e.message_group_id(), Some("g"));
        assert_eq!(e.message_deduplication_id(), Some("t-2"));
    }

    #[test]
    fn refusals_before_any_request() {
        let t = topic("arn:aws:sns:us-east-1:1:jobs").with_max_message_bytes(100);
        assert!(matches!(
            t.check(&Job::raw("big", "x".repeat(100))),
            Err(SendError::TooLarge { limit: 100, .. })
        ));
        assert!(matches!(
            t.check(&Job::raw("", "{}")),
            Err(SendError::InvalidJobId { .. })
        ));
        assert!(t.check(&Job::raw("ok", "{}")).is_ok());
    }
}
