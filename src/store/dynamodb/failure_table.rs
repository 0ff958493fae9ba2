//! Failure records in DynamoDB: one item per failed job (the latest
//! attempt overwrites the one before) in the idemq table, under
//! `idemq#ns#<namespace>#failure#<job id>`
//! ([`TableLayout::failure_key`]), kept as long as the markers.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::types::AttributeValue;
use futures_util::future::BoxFuture;

use crate::config::TableLayout;
use crate::failure::{
    DlqError, Failure, FailureKind, FailureRecord, LetterKey, MAX_RECORD_BACKTRACE,
    MAX_RECORD_ERROR, capped_chain, truncate,
};
use crate::store::FailureRecords;

/// The failure records of one idemq table.
#[derive(Debug, Clone)]
pub struct FailureTable {
    ddb: aws_sdk_dynamodb::Client,
    layout: TableLayout,
    ttl: Duration,
}

impl FailureTable {
    /// Records in the idemq table of `layout`, each kept `ttl`.
    pub fn new(ddb: aws_sdk_dynamodb::Client, layout: TableLayout, ttl: Duration) -> Self {
        Self { ddb, layout, ttl }
    }

    /// Every key a record of this job may be under, the likeliest first:
    /// the consumer's namespace(s), then the un-namespaced key of records
    /// written before namespaces.
    fn read_keys(&self, sources: &[String], job_id: Option<&str>, message_id: &str) -> Vec<String> {
        let l = &self.layout;
        let namespaces: Vec<&str> = match &l.namespace {
            Some(ns) => vec![ns.as_str()],
            None => sources.iter().map(String::as_str).collect(),
        };
        namespaces
            .into_iter()
            .map(|ns| l.failure_key(ns, job_id, message_id))
            .chain([l.legacy_failure_key(job_id, message_id)])
            .collect()
    }

    /// Stores `rec` (one `PutItem`; only failures pay for it).
    pub(crate) async fn put_record(&self, rec: &FailureRecord) -> Result<(), DlqError> {
        let expires = (rec.failed_at + self.ttl)
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let s = |v: &str| AttributeValue::S(v.to_owned());
        let mut item = HashMap::from([
            (
                self.layout.partition_key.clone(),
                s(&self.layout.failure_key(
                    self.layout.namespace_for(&rec.source_queue),
                    rec.job_id.as_deref(),
                    &rec.message_id,
                )),
            ),
            ("message_id".into(), s(&rec.message_id)),
            ("attempt".into(), AttributeValue::N(rec.attempt.to_string())),
            ("kind".into(), s(rec.failure.kind.as_str())),
            (
                "error".into(),
                s(&truncate(&rec.failure.error, MAX_RECORD_ERROR)),
            ),
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
        // Which deploy failed: left out when unknown, and read back as
        // empty from a record written before records named it.
        for (name, value) in [
            ("deploy", &rec.deploy),
            ("idemq_version", &rec.idemq_version),
        ] {
            if !value.is_empty() {
                item.insert(name.into(), s(value));
            }
        }
        // Where it failed, capped again in case the record was made by hand.
        if let Some(bt) = &rec.failure.backtrace {
            item.insert("backtrace".into(), s(&truncate(bt, MAX_RECORD_BACKTRACE)));
        }
        let chain = capped_chain(&rec.failure.chain);
        if !chain.is_empty() {
            item.insert(
                "error_chain".into(),
                AttributeValue::L(chain.iter().map(|c| s(c)).collect()),
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
    /// message without a valid job id), under any key it may be stored
    /// under: the namespaces of `sources`, then the legacy key.
    async fn get_record(
        &self,
        sources: &[String],
        job_id: Option<&str>,
        message_id: &str,
    ) -> Result<Option<FailureRecord>, DlqError> {
        for key in self.read_keys(sources, job_id, message_id) {
            let out = self
                .ddb
                .get_item()
                .table_name(&self.layout.table_name)
                .key(&self.layout.partition_key, AttributeValue::S(key))
                .consistent_read(true)
                .send()
                .await
                .map_err(|e| DlqError::DynamoDb(DisplayErrorContext(e).to_string()))?;
            if let Some(item) = out.item() {
                return Ok(Some(self.parse(item)));
            }
        }
        Ok(None)
    }

    /// Reads the failure records of many dead letters, 100 keys per
    /// `BatchGetItem`. Keyed by `(job id, message id)` as given.
    async fn batch_get_records(
        &self,
        sources: &[String],
        wanted: &[LetterKey],
    ) -> Result<HashMap<LetterKey, FailureRecord>, DlqError> {
        let pk = &self.layout.partition_key;
        // Each key, the records it may hold and how likely it is (its rank
        // among that record's keys): a namespaced record wins over a
        // legacy one of the same job.
        let mut by_key: HashMap<String, Vec<(LetterKey, usize)>> = HashMap::new();
        for (job, msg) in wanted {
            for (rank, key) in self
                .read_keys(sources, job.as_deref(), msg)
                .into_iter()
                .enumerate()
            {
                by_key
                    .entry(key)
                    .or_default()
                    .push(((job.clone(), msg.clone()), rank));
            }
        }
        let mut ranks: HashMap<LetterKey, usize> = HashMap::new();
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
                    for (wanted, rank) in by_key.get(key).into_iter().flatten() {
                        if ranks.get(wanted).is_none_or(|best| rank < best) {
                            ranks.insert(wanted.clone(), *rank);
                            found.insert(wanted.clone(), self.parse(item));
                        }
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
        let kind = FailureKind::parse(&s("kind")).unwrap_or(FailureKind::Transient);
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
                backtrace: item.get("backtrace").and_then(|v| v.as_s().ok()).cloned(),
            },
            failed_at: humantime::parse_rfc3339(&s("failed_at")).unwrap_or(UNIX_EPOCH),
            source_queue: s("source_queue"),
            payload_hash: s(&self.layout.payload_hash),
            deploy: s("deploy"),
            idemq_version: s("idemq_version"),
        }
    }
}

impl FailureRecords for FailureTable {
    fn record_failure<'a>(&'a self, rec: &'a FailureRecord) -> BoxFuture<'a, Result<(), DlqError>> {
        Box::pin(self.put_record(rec))
    }

    fn read_failure<'a>(
        &'a self,
        sources: &'a [String],
        job_id: Option<&'a str>,
        message_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<FailureRecord>, DlqError>> {
        Box::pin(self.get_record(sources, job_id, message_id))
    }

    fn read_failures<'a>(
        &'a self,
        sources: &'a [String],
        wanted: &'a [LetterKey],
    ) -> BoxFuture<'a, Result<HashMap<LetterKey, FailureRecord>, DlqError>> {
        Box::pin(self.batch_get_records(sources, wanted))
    }
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}
