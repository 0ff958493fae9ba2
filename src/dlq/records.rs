//! Reading the failure records of a consumer's dead letters, whichever
//! store keeps them: the context `idemq dlq` shows for a letter SQS's
//! redrive moved without one.

use std::collections::HashMap;
use std::sync::Arc;

use crate::failure::{DlqError, FailureRecord, LetterKey};
use crate::store::FailureRecords;

/// A store's failure records, read under every namespace a consumer of
/// this DLQ may have written them in.
#[derive(Debug, Clone)]
pub struct Records {
    records: Arc<dyn FailureRecords>,
    /// The namespaces a read looks in, besides the layout's own.
    sources: Vec<String>,
}

impl Records {
    /// The records `records` keeps, read under the layout's own namespace.
    pub fn new(records: Arc<dyn FailureRecords>) -> Self {
        Self {
            records,
            sources: Vec::new(),
        }
    }

    /// Reads look for records in the namespaces of these source queues
    /// (names, URLs or ARNs: a DLQ's `ListDeadLetterSourceQueues`) when the
    /// layout sets no namespace, and always under the key an earlier
    /// version wrote.
    pub fn with_source_queues<S: AsRef<str>>(mut self, queues: &[S]) -> Self {
        self.sources = queues
            .iter()
            .map(|q| crate::config::queue_name(q.as_ref()).to_owned())
            .collect();
        self
    }

    /// Stores `rec`, replacing the job's previous record, as the consumer
    /// does when a job fails.
    pub async fn record(&self, rec: &FailureRecord) -> Result<(), DlqError> {
        self.records.record_failure(rec).await
    }

    /// Reads the failure record of a job (or, with `job_id` `None`, of a
    /// message without a valid job id), under any key it may be stored
    /// under (see [`Records::with_source_queues`]).
    pub async fn read(
        &self,
        job_id: Option<&str>,
        message_id: &str,
    ) -> Result<Option<FailureRecord>, DlqError> {
        self.records
            .read_failure(&self.sources, job_id, message_id)
            .await
    }

    /// Reads the failure records of many dead letters (on DynamoDB, 100
    /// keys per `BatchGetItem`). Keyed by `(job id, message id)` as given.
    pub async fn read_many(
        &self,
        wanted: &[LetterKey],
    ) -> Result<HashMap<LetterKey, FailureRecord>, DlqError> {
        self.records.read_failures(&self.sources, wanted).await
    }
}
