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
//! One `GetItem` with `ConsistentRead` (a strongly consistent read "returns
//! a result that reflects all writes that received a successful response
//! prior to the read",
//! <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.ReadConsistency.html>),
//! 1 read unit for a marker of up to 4 KB
//! (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html>).
//! It cannot see a [fused](crate::Effect::marked_by) marker, whose key the
//! handler's effect names: such a job's handler runs, and its commit finds
//! the marker as before.
//!
//! The same look-up reads the key a marker had before markers were
//! namespaced, while [`LegacyMarkers`](crate::config::LegacyMarkers) says
//! so, side by side with the first read: a job committed by an earlier
//! version is still a duplicate after the upgrade. Both happen once per
//! delivery, before the handler, never again when a lost race re-runs it.
//!
//! The look-up does not replace the commit's condition: a copy racing this
//! one can commit between the read and the commit, and the commit's
//! condition then settles it as before.

use aws_sdk_dynamodb::operation::get_item::GetItemError;

use super::{CommitError, CommitOutcome, Committer, JobRef, WriteError, classify_sdk_error};
use crate::store::dynamodb::effect::Item;
use crate::store::{LookedUp, Settled};

impl WriteError for GetItemError {
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

impl Committer {
    /// Whether [`Committer::look_up`] reads anything for a job at this
    /// moment: the marker first ([`Committer::with_marker_first`]), or a
    /// legacy marker.
    pub fn looks_up(&self) -> bool {
        self.marker_first || self.legacy.read_at(crate::clock::now())
    }

    /// The job's marker, read before its handler runs: this consumer's
    /// (when it reads markers first) and, while legacy markers are read,
    /// the one an earlier version wrote, both at once. An error of either
    /// read is the job's failure (transient, or a deployment error that
    /// names the permission): running the handler without knowing whether
    /// the job was done is what the look-up is there to avoid.
    pub async fn look_up(&self, job: JobRef<'_>) -> Result<LookedUp, CommitError> {
        let ours = async {
            if !self.marker_first {
                return Ok(None);
            }
            self.read_marker_item(self.marker_key(job)).await
        };
        let legacy = async {
            if !self.legacy.read_at(crate::clock::now()) {
                return Ok(None);
            }
            self.read_marker_item(self.key(self.layout.legacy_marker_key(job.id.as_str())))
                .await
        };
        let (ours, legacy) = tokio::join!(ours, legacy);
        // A deployment error wins over a transient one: it names what to fix.
        let (ours, legacy) = match (ours, legacy) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(Err(e)), _) | (_, Err(Err(e))) => return Err(e),
            (Err(Ok(outcome)), _) | (_, Err(Ok(outcome))) => {
                return Ok(LookedUp::Settled(Settled::new(outcome)));
            }
        };
        if let Some(item) = ours {
            return Ok(self.settle_found(job, item));
        }
        if let Some(item) = legacy.filter(|item| self.legacy_is_ours(job, item)) {
            return Ok(self.settle_found(job, item));
        }
        Ok(LookedUp::Absent)
    }

    /// A consistent `GetItem` of `key` in the idemq table; a failed read as
    /// the outcome (transient) or error (deployment) it is.
    async fn read_marker_item(
        &self,
        key: Item,
    ) -> Result<Option<Item>, Result<CommitOutcome, CommitError>> {
        let table = &self.layout.table_name;
        match self.consistent_get_item(table, key).await {
            Ok(item) => Ok(item),
            Err(e) => {
                let needs = super::deployment::Needs::read(table);
                match classify_sdk_error(e, &needs) {
                    Ok(CommitOutcome::Transient { reason }) => Err(Ok(CommitOutcome::Transient {
                        reason: format!("the job's marker could not be read: {reason}"),
                    })),
                    Ok(other) => Err(Ok(other)),
                    Err(e) => Err(Err(e)),
                }
            }
        }
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
