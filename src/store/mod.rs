//! Systems of record: where a job's marker is committed with its effect.
//!
//! The rule idemq is built on is that the dedup marker lives in the same
//! system of record as the job's effect and is committed in the same
//! transaction. A [`Store`] is one such system: it commits a job's marker
//! with the effect its handler returned and says what happened
//! ([`CommitOutcome`]), reads a job's marker before its handler runs
//! ([`Store::look_up`]) and after ([`Store::read_marker`]). The batch
//! (classification, backoff, the batch response, dead letters, follow-up
//! sends, metrics) knows no store; it sees one only through this trait.
//!
//! - [`dynamodb`]: DynamoDB, one `TransactWriteItems` per job
//!   ([`DynamoDb`](dynamodb::DynamoDb));
//! - `postgres` (feature `postgres`): PostgreSQL, one pipelined SQL
//!   transaction per job (`Postgres`).
//!
//! A store of another system implements [`Store`] (and, for the operator
//! tools, [`FailureRecords`] and [`Provision`]) and runs the conformance
//! suite the built-in stores run (docs/stores.md).

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::failure::{DlqError, FailureRecord, LetterKey};
use crate::followup::{FollowUp, StoredMarker};
use crate::job::JobId;

pub mod dynamodb;
#[cfg(feature = "postgres")]
pub mod postgres;

pub use crate::commit::{CommitError, CommitOutcome, InvalidEffect, JobRef, Marker};

/// A system of record that commits a job's marker with its effect,
/// atomically.
///
/// Object-safe: the batch holds its store as `Arc<dyn Store<Effect = E>>`
/// and never names one. Every method that does I/O returns a boxed future,
/// and the ones the batch calls for many jobs take them all at once
/// ([`look_up`](Self::look_up), [`commit_batch`](Self::commit_batch)), so
/// that a store can serve a whole batch in one round trip where its
/// protocol allows.
///
/// Every method is safe to call concurrently, for different jobs and for
/// the same one: two deliveries of a job may both run their handler, and
/// exactly one commit applies its effect, the other being a
/// [`CommitOutcome::Duplicate`] (no lease, no lock held across a handler).
///
/// A store outside this crate implements it too: it promises what the
/// built-in stores promise once it passes the conformance suite
/// (`idemq::testing::store_suite`, feature `testing`), which they pass.
pub trait Store: Send + Sync + 'static {
    /// What a handler returns: the writes that are its result, in this
    /// store's terms, with the follow-up jobs to send once they commit.
    type Effect: Send + Sync + 'static;

    /// The follow-up jobs `effect` carries ([`crate::followup`]).
    fn follow_ups<'e>(&self, effect: &'e Self::Effect) -> &'e [FollowUp];

    /// The consumer's namespace for jobs received from `queue` (a name or
    /// a URL): what its markers, failure records and downstream keys are
    /// keyed by.
    fn namespace_for<'a>(&'a self, queue: &'a str) -> &'a str;

    /// Whether [`look_up`](Self::look_up) reads anything at this moment;
    /// when not, the batch does not call it.
    fn looks_up(&self) -> bool;

    /// The markers of `jobs`, read before their handlers run: a job
    /// already committed is settled without running its handler. One
    /// result per job, in the order of `jobs`; a job whose read failed is
    /// that job's `Err`, not the others'.
    fn look_up<'a>(
        &'a self,
        jobs: &'a [JobRef<'a>],
    ) -> BoxFuture<'a, Vec<Result<LookedUp, CommitError>>>;

    /// Commits `effect` and the job's marker in one transaction of the
    /// store, and says what happened; for a duplicate, with the marker as
    /// stored (its follow-ups are sent again within the horizon).
    fn commit<'a>(
        &'a self,
        job: JobRef<'a>,
        effect: &'a Self::Effect,
    ) -> BoxFuture<'a, Result<Settled, CommitError>>;

    /// Commits many jobs, each in a transaction of its own (one job's
    /// failure never undoes another's commit): one result per job, in
    /// order. By default the jobs' [`commit`](Self::commit)s side by side;
    /// a store whose protocol can carry several transactions in one round
    /// trip overrides it.
    fn commit_batch<'a>(
        &'a self,
        jobs: &'a [(JobRef<'a>, &'a Self::Effect)],
    ) -> BoxFuture<'a, Vec<Result<Settled, CommitError>>> {
        Box::pin(futures_util::future::join_all(
            jobs.iter().map(|(job, effect)| self.commit(*job, effect)),
        ))
    }

    /// Whether [`commit_batch`](Self::commit_batch) answers many jobs in
    /// fewer round trips than their [`commit`](Self::commit)s side by side
    /// (PostgreSQL pipelines them on one or two connections). When it does, the
    /// batch gathers the commits of jobs whose handlers finish together
    /// and hands them to `commit_batch` at once; when not (the default;
    /// DynamoDB, one `TransactWriteItems` per job), each job commits as
    /// soon as its handler returns.
    fn groups_commits(&self) -> bool {
        false
    }

    /// The marker of job `job_id` as committed from `queue`, if any.
    fn read_marker<'a>(
        &'a self,
        queue: &'a str,
        job_id: &'a JobId,
    ) -> BoxFuture<'a, Result<Option<Marker>, CommitError>>;

    /// Stores `rec`, replacing the job's previous failure record: the
    /// context `idemq dlq` shows for a dead letter SQS's redrive moved.
    fn record_failure<'a>(&'a self, rec: &'a FailureRecord) -> BoxFuture<'a, Result<(), DlqError>>;

    /// How long this store keeps markers: a job first enqueued that long
    /// ago or more is not run ([`crate::horizon`]).
    fn marker_ttl(&self) -> Duration;
}

/// A settled commit: its outcome and, for a duplicate, the marker as
/// stored.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Settled {
    /// What happened.
    pub outcome: CommitOutcome,
    /// For a [`CommitOutcome::Duplicate`], the marker as stored (with the
    /// follow-ups it carries), when the store read it.
    pub stored: Option<StoredMarker>,
}

impl Settled {
    /// `outcome`, without a stored marker.
    pub fn new(outcome: CommitOutcome) -> Self {
        Self {
            outcome,
            stored: None,
        }
    }

    /// A duplicate, with the marker as stored.
    pub(crate) fn duplicate(stored: StoredMarker) -> Self {
        Self {
            outcome: CommitOutcome::Duplicate,
            stored: Some(stored),
        }
    }
}

/// What a look-up before the handler found.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum LookedUp {
    /// No marker of this job: run the handler and commit.
    Absent,
    /// The job is settled without its handler: a duplicate (with the
    /// marker as stored) or a conflict, or the read failed transiently.
    Settled(Settled),
}

/// Where a store keeps failure records: why each failed job last failed,
/// for the dead-letter tools ([`crate::dead_letter`], [`crate::dlq`]).
///
/// Object-safe: the batch and the tools hold one as
/// `Arc<dyn FailureRecords>`. A read looks for a record under the
/// consumer's namespace, or, when the layout sets none, under those of
/// `sources` (the source queues' names), then where an earlier version
/// wrote it.
pub trait FailureRecords: Send + Sync + fmt::Debug {
    /// Stores `rec`, replacing the job's previous record.
    fn record_failure<'a>(&'a self, rec: &'a FailureRecord) -> BoxFuture<'a, Result<(), DlqError>>;

    /// The record of a job (or, with `job_id` `None`, of a message without
    /// a valid job id), if any.
    fn read_failure<'a>(
        &'a self,
        sources: &'a [String],
        job_id: Option<&'a str>,
        message_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<FailureRecord>, DlqError>>;

    /// The records of many dead letters, keyed as asked.
    fn read_failures<'a>(
        &'a self,
        sources: &'a [String],
        wanted: &'a [LetterKey],
    ) -> BoxFuture<'a, Result<HashMap<LetterKey, FailureRecord>, DlqError>>;
}

/// A store's schema, created if missing or verified if present, in the
/// same way every time (`idemq init`).
pub trait Provision: Send + Sync {
    /// Creates or verifies the schema. A difference that makes the store
    /// unusable is an error; one that falls short of what the templates
    /// create (encryption, backups, …) is pushed to `violations`.
    fn provision<'a>(
        &'a self,
        violations: &'a mut Vec<String>,
    ) -> BoxFuture<'a, Result<Provisioned, ProvisionError>>;
}

/// What [`Provision::provision`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provisioned {
    /// The schema's resource, as `idemq init` names it (`table idemq`).
    pub name: String,
    /// Whether it was created now (false: it existed and was verified).
    pub created: bool,
}

/// Why a store's schema could not be created or verified.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    /// It exists with a different setting than asked for.
    #[error("{resource} exists with {attribute} = {found}, but {expected} was asked for")]
    Mismatch {
        /// The resource.
        resource: String,
        /// The setting.
        attribute: &'static str,
        /// What was asked for.
        expected: String,
        /// What it has.
        found: String,
    },
    /// A call to the store failed.
    #[error("{0}")]
    Store(String),
    /// The resource (name) was not ready within the wait (duration).
    #[error("{0} was not ready within {1:?}")]
    NotReady(String, Duration),
}
