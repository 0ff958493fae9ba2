//! DynamoDB as the system of record: the marker and the effect in one
//! `TransactWriteItems`.
//!
//! - [`commit`]: the dedup transaction ([`Committer`]), the marker read
//!   before the handler, the single-write fast path, marker-form switches;
//! - [`effect`]: the handler's writes ([`Effect`], [`Write`], [`Key`]) and
//!   DynamoDB's limits on them;
//! - `outbox`: follow-up jobs stored in the marker item;
//! - [`FailureTable`]: failure records, next to the markers;
//! - [`TableProvisioner`]: the table, created as the templates create it
//!   (`idemq init`).

use std::time::Duration;

use crate::commit::{CommitError, JobRef, Marker};
use crate::followup::FollowUp;
use crate::job::JobId;
use crate::store::{LookedUp, Settled, Store, sealed};

pub mod commit;
pub mod effect;
mod failure_table;
mod outbox;
mod provision;

pub use commit::Committer;
pub use effect::{Effect, EffectError, Key, Write};
pub use failure_table::FailureTable;
pub use provision::{TableProtection, TableProvisioner};

impl From<EffectError> for CommitError {
    fn from(e: EffectError) -> Self {
        Self::Effect(crate::commit::InvalidEffect::new(e))
    }
}

/// DynamoDB as a [`Store`]: markers, effects and follow-ups committed by a
/// [`Committer`], in the tables its [`TableLayout`](crate::TableLayout)
/// names.
#[derive(Debug, Clone)]
pub struct DynamoDb {
    committer: Committer,
}

impl DynamoDb {
    /// The store that commits through `committer`.
    pub fn new(committer: Committer) -> Self {
        Self { committer }
    }

    /// The committer behind this store.
    pub fn committer(&self) -> &Committer {
        &self.committer
    }
}

impl sealed::Sealed for DynamoDb {}

impl Store for DynamoDb {
    type Effect = Effect;

    fn follow_ups(effect: &Effect) -> &[FollowUp] {
        effect.follow_ups()
    }

    fn namespace_for<'a>(&'a self, queue: &'a str) -> &'a str {
        self.committer.layout().namespace_for(queue)
    }

    fn looks_up(&self) -> bool {
        self.committer.looks_up()
    }

    async fn look_up(&self, job: JobRef<'_>) -> Result<LookedUp, CommitError> {
        self.committer.look_up(job).await
    }

    async fn commit(&self, job: JobRef<'_>, effect: &Effect) -> Result<Settled, CommitError> {
        self.committer.settle(job, effect).await
    }

    async fn read_marker(
        &self,
        queue: &str,
        job_id: &JobId,
    ) -> Result<Option<Marker>, CommitError> {
        self.committer.read_marker(queue, job_id).await
    }

    fn marker_ttl(&self) -> Duration {
        self.committer.marker_ttl()
    }
}
