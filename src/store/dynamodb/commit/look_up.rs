//! The marker look-up before the handler: a consistent read of the job's
//! marker, so that a job already committed is settled without running its
//! handler again.
//!
//! The commit alone already makes a redelivery harmless to the effect (its
//! marker condition fails, nothing is written twice), but the handler has
//! run by then: whatever it did outside the transaction (a card charge, an
//! e-mail, a call to another API) it did again. A downstream idempotency
//! key ([`JobMeta::downstream_key`](crate::JobMeta::downstream_key)) covers
//! that only within the provider's own key window, and a job's copy can
//! arrive long after it: through a visibility timeout after a crash, a DLQ
//! replay days later. Reading the marker first closes that: a duplicate's
//! handler does not run, and the follow-ups its marker stores are still
//! re-sent ([`crate::followup`]).
//!
//! One consistent `BatchGetItem` for a whole batch: a strongly consistent
//! read "returns a result that reflects all writes that received a
//! successful response prior to the read"
//! (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.ReadConsistency.html>),
//! 1 read unit for a marker of up to 4 KB
//! (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html>),
//! and one request for up to 100 keys. `BatchGetItem` may answer part of
//! a request, the rest in `UnprocessedKeys` (throttled, or past 16 MB),
//! and refuses more than 100 keys or the same key twice with a
//! `ValidationException`
//! (<https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchGetItem.html>):
//! the keys are deduplicated, sent 100 at a time, and the unprocessed ones
//! asked again with exponential backoff and full jitter; a key still
//! unread after that is its jobs' transient failure, not the batch's.
//! The look-up cannot see a [fused](crate::store::dynamodb::Effect::marked_by) marker,
//! whose key the handler's effect names: such a job's handler runs, and
//! its commit finds the marker as before.
//!
//! The same request reads the key a marker had before markers were
//! namespaced, while [`LegacyMarkers`](crate::config::LegacyMarkers) says
//! so (read units, not requests): a job committed by an earlier version is
//! still a duplicate after the upgrade. Both happen once per delivery,
//! before the handler, never again when a lost race re-runs it.
//!
//! The look-up does not replace the commit's condition: a copy racing this
//! one can commit between the read and the commit, and the commit's
//! condition then settles it as before.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemError;
use aws_sdk_dynamodb::operation::get_item::GetItemError;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
use rand::RngExt;

use super::{CommitError, CommitOutcome, Committer, JobRef, WriteError, classify_sdk_error};
use crate::store::dynamodb::effect::Item;
use crate::store::{LookedUp, Settled};

/// Keys per `BatchGetItem`: DynamoDB's limit.
const KEYS_PER_REQUEST: usize = 100;

/// Requests per chunk of keys before the keys DynamoDB keeps leaving
/// unprocessed are given up on (the jobs are retried with backoff).
const TRIES: u32 = 6;

/// What one key's read came to: the item, if any, or the failure (an
/// outcome, or a deployment error) every job that needed it shares.
type KeyRead = Result<Option<Item>, ReadFailure>;

#[derive(Debug)]
enum ReadFailure {
    Outcome(CommitOutcome),
    Error(CommitError),
}

impl ReadFailure {
    fn copy(&self) -> Self {
        match self {
            Self::Outcome(outcome) => Self::Outcome(outcome.clone()),
            Self::Error(e) => Self::Error(e.shared()),
        }
    }

    /// The failure as one job's look-up result.
    fn for_job(&self) -> Result<LookedUp, CommitError> {
        match self {
            Self::Outcome(outcome) => Ok(LookedUp::Settled(Settled::new(outcome.clone()))),
            Self::Error(e) => Err(e.shared()),
        }
    }
}

/// The two reads' errors classify alike: throttled or a server error is
/// transient, a missing table a deployment error.
macro_rules! read_error {
    ($($error:ty),*) => {$(
        impl WriteError for $error {
            fn is_transient(&self) -> bool {
                self.is_provisioned_throughput_exceeded_exception()
                    || self.is_request_limit_exceeded()
                    || self.is_throttling_exception()
                    || self.is_internal_server_error()
            }

            fn is_table_missing(&self) -> bool {
                self.is_resource_not_found_exception()
            }
        }
    )*};
}

read_error!(BatchGetItemError, GetItemError);

impl Committer {
    /// Whether [`Committer::look_up`] reads anything for a job at this
    /// moment: the marker first ([`Committer::with_marker_first`]), or a
    /// legacy marker.
    pub fn looks_up(&self) -> bool {
        self.marker_first || self.legacy.read_at(crate::clock::now())
    }

    /// The markers of `jobs`, read before their handlers run, in one
    /// consistent `BatchGetItem` per 100 keys: this consumer's (when it
    /// reads markers first) and, while legacy markers are read, the one an
    /// earlier version wrote. One result per job, in order. A failed read
    /// is the failure of the jobs whose keys it carried (transient, or a
    /// deployment error that names the permission): running a handler
    /// without knowing whether the job was done is what the look-up is
    /// there to avoid.
    pub async fn look_up(&self, jobs: &[JobRef<'_>]) -> Vec<Result<LookedUp, CommitError>> {
        let ours = self.marker_first;
        let legacy = self.legacy.read_at(crate::clock::now());
        let wanted: Vec<(Option<String>, Option<String>)> = jobs
            .iter()
            .map(|job| {
                (
                    ours.then(|| {
                        let namespace = self.layout.namespace_for(job.queue);
                        self.layout.marker_key(namespace, job.id.as_str())
                    }),
                    legacy.then(|| self.layout.legacy_marker_key(job.id.as_str())),
                )
            })
            .collect();
        let mut seen = HashSet::new();
        let keys: Vec<String> = wanted
            .iter()
            .flat_map(|(a, b)| [a, b])
            .flatten()
            .filter(|k| seen.insert(k.as_str()))
            .cloned()
            .collect();
        let reads = futures_util::future::join_all(
            keys.chunks(KEYS_PER_REQUEST)
                .map(|chunk| self.batch_read(chunk)),
        )
        .await;
        let found: HashMap<String, KeyRead> = reads.into_iter().flatten().collect();
        let read = |key: &Option<String>| -> Result<Option<&Item>, &ReadFailure> {
            match key.as_ref().map(|k| &found[k]) {
                None => Ok(None),
                Some(Ok(item)) => Ok(item.as_ref()),
                Some(Err(failure)) => Err(failure),
            }
        };
        jobs.iter()
            .zip(&wanted)
            .map(|(job, (ours, legacy))| {
                // A deployment error wins over a transient one: it names
                // what to fix.
                let (ours, legacy) = match (read(ours), read(legacy)) {
                    (Ok(a), Ok(b)) => (a, b),
                    (Err(f @ ReadFailure::Error(_)), _) | (_, Err(f @ ReadFailure::Error(_))) => {
                        return f.for_job();
                    }
                    (Err(f), _) | (_, Err(f)) => return f.for_job(),
                };
                if let Some(item) = ours {
                    return Ok(self.settle_found(*job, item.clone()));
                }
                if let Some(item) = legacy.filter(|item| self.legacy_is_ours(*job, item)) {
                    return Ok(self.settle_found(*job, item.clone()));
                }
                Ok(LookedUp::Absent)
            })
            .collect()
    }

    /// Reads up to 100 distinct keys of the idemq table, consistently,
    /// asking again for those DynamoDB leaves unprocessed: each key with
    /// its item (or none), or the failure of the request that carried it.
    async fn batch_read(&self, keys: &[String]) -> Vec<(String, KeyRead)> {
        let table = &self.layout.table_name;
        let pk = &self.layout.partition_key;
        let mut read: Vec<(String, KeyRead)> = Vec::with_capacity(keys.len());
        let mut pending: Vec<String> = keys.to_vec();
        for attempt in 0..TRIES {
            if pending.is_empty() {
                break;
            }
            if attempt > 0 {
                // Full jitter over 25 ms doubling: DynamoDB asks for
                // exponential backoff before unprocessed keys are asked again.
                let ceiling = 25u64 << attempt;
                let ms = crate::clock::with_jitter(|rng| rng.random_range(0..=ceiling));
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            let out = match self.batch_get_items(table, &pending).await {
                Ok(out) => out,
                Err(e) => {
                    let needs = super::deployment::Needs::batch_read(table);
                    let failure = match classify_sdk_error(e, &needs) {
                        Ok(CommitOutcome::Transient { reason }) => {
                            ReadFailure::Outcome(CommitOutcome::Transient {
                                reason: format!("the job's marker could not be read: {reason}"),
                            })
                        }
                        Ok(other) => ReadFailure::Outcome(other),
                        Err(e) => ReadFailure::Error(e),
                    };
                    // Every key of the request shares its failure.
                    read.extend(pending.drain(..).map(|k| (k, Err(failure.copy()))));
                    return read;
                }
            };
            let mut items: HashMap<String, Item> = out
                .responses
                .and_then(|mut r| r.remove(table))
                .unwrap_or_default()
                .into_iter()
                .filter_map(|item| Some((item.get(pk)?.as_s().ok()?.clone(), item)))
                .collect();
            let unprocessed: HashSet<String> = out
                .unprocessed_keys
                .and_then(|mut u| u.remove(table))
                .map(|k| k.keys)
                .unwrap_or_default()
                .iter()
                .filter_map(|key| key.get(pk)?.as_s().ok().cloned())
                .collect();
            let (again, done): (Vec<String>, Vec<String>) =
                pending.drain(..).partition(|k| unprocessed.contains(k));
            read.extend(done.into_iter().map(|k| {
                let item = items.remove(&k);
                (k, Ok(item))
            }));
            pending = again;
        }
        let reason = format!(
            "the job's marker could not be read: DynamoDB left it unprocessed in {TRIES} \
             BatchGetItem requests (throttled)"
        );
        read.extend(pending.into_iter().map(|k| {
            (
                k,
                Err(ReadFailure::Outcome(CommitOutcome::Transient {
                    reason: reason.clone(),
                })),
            )
        }));
        read
    }

    /// The `BatchGetItem` request of the look-up: `keys` of the idemq
    /// table, consistently.
    async fn batch_get_items(
        &self,
        table: &str,
        keys: &[String],
    ) -> Result<
        aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemOutput,
        aws_sdk_dynamodb::error::SdkError<BatchGetItemError>,
    > {
        let keys = keys
            .iter()
            .map(|k| {
                HashMap::from([(
                    self.layout.partition_key.clone(),
                    AttributeValue::S(k.clone()),
                )])
            })
            .collect();
        let request = KeysAndAttributes::builder()
            .set_keys(Some(keys))
            .consistent_read(true)
            .build()
            .expect("keys are set");
        self.client
            .batch_get_item()
            .request_items(table, request)
            .send()
            .await
    }

    /// A stored marker of this job: a duplicate when its payload hash is
    /// this delivery's, else a conflict (never a silent skip).
    fn settle_found(&self, job: JobRef<'_>, item: Item) -> LookedUp {
        match self.parse_marker(&item) {
            Some(m) if &m.payload_hash == job.payload_hash => {
                LookedUp::Settled(Settled::duplicate(self.stored_marker(job, item)))
            }
            Some(m) => LookedUp::Settled(Settled::new(CommitOutcome::Conflict {
                stored_hash: m.payload_hash,
            })),
            // Not a marker idemq wrote (no job id or hash): leave it to the
            // commit, whose condition reports it.
            None => LookedUp::Absent,
        }
    }

    /// Whether a legacy marker is this consumer's. It names the queue it
    /// was committed from; with the default namespace (the queue's name)
    /// one that names another queue is another consumer's, and does not
    /// make this job a duplicate. With a namespace set, any legacy marker
    /// is taken as this consumer's: a job is then never applied twice, at
    /// the cost of a fan-out job committed before the upgrade staying
    /// skipped as before.
    fn legacy_is_ours(&self, job: JobRef<'_>, item: &Item) -> bool {
        let Some(m) = self.parse_marker(item) else {
            return false;
        };
        let queue = crate::config::queue_name(&m.queue);
        self.layout.namespace.is_some()
            || queue.is_empty()
            || queue == crate::config::queue_name(job.queue)
    }
}
