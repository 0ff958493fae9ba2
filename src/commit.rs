//! What a commit can end in, whichever store made it: the outcomes the
//! batch classifies ([`CommitOutcome`]), the errors that no retry mends
//! ([`CommitError`]), the job a commit is for ([`JobRef`]) and a marker as
//! stored ([`Marker`]).
//!
//! The dedup transaction itself is the store's: on DynamoDB,
//! [`Committer`](crate::store::dynamodb::Committer) (`src/store/dynamodb/commit.rs`).

use std::error::Error;
use std::fmt;
use std::time::SystemTime;

use crate::job::{JobId, PayloadHash};

/// What happened to one job's commit.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CommitOutcome {
    /// Marker and effect are applied.
    Committed,
    /// The job was committed before, with the same payload: acknowledge it
    /// and apply nothing.
    Duplicate,
    /// The job id was committed before with a *different* payload. Nothing
    /// was applied; this is never acknowledged silently.
    Conflict {
        /// The hash of the payload committed first.
        stored_hash: PayloadHash,
    },
    /// An effect write's own condition failed (the handler's business
    /// outcome, e.g. insufficient funds), or the item a
    /// [`marked_by`](crate::store::dynamodb::Effect::marked_by) write creates exists and is not this
    /// job's. Nothing was applied, no marker left.
    Rejected {
        /// The index of the write in [`Effect::writes`](crate::store::dynamodb::Effect::writes).
        index: usize,
        /// DynamoDB's message, or what the existing item is.
        reason: String,
    },
    /// The condition of a write marked [`Write::optimistic`](crate::store::dynamodb::Write::optimistic) failed, and no
    /// unmarked write's: the state the handler read moved under it (a lost
    /// optimistic-concurrency race). Nothing was applied, no marker left;
    /// running the handler again (re-reading) may commit.
    Contended {
        /// The index of the write in [`Effect::writes`](crate::store::dynamodb::Effect::writes).
        index: usize,
        /// DynamoDB's message.
        reason: String,
    },
    /// DynamoDB cancelled the transaction because another request was
    /// writing one of its items at the same moment (cancellation reason
    /// `TransactionConflict`; for a single write,
    /// `TransactionConflictException`). Nothing was applied, no marker
    /// left: a lost race like [`Contended`](Self::Contended), and re-run
    /// the same way (the job may then commit, or find the other request's
    /// marker and be a duplicate).
    Collided {
        /// Which item was held and DynamoDB's message.
        reason: String,
    },
    /// Throttling, a timeout or a server error: nothing is known to be
    /// applied, and trying again later is safe.
    Transient {
        /// What happened, for the failure record and the logs.
        reason: String,
    },
}

/// A commit that cannot succeed by being tried again.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// The effect cannot be committed as it is (found before any I/O):
    /// the store's own error inside ([`InvalidEffect::downcast_ref`], e.g.
    /// to an [`EffectError`](crate::store::dynamodb::EffectError) on DynamoDB).
    #[error("invalid effect: {0}")]
    Effect(InvalidEffect),
    /// DynamoDB refused the request as invalid.
    #[error("DynamoDB refused the transaction as invalid: {0}")]
    Invalid(String),
    /// A table written does not exist: a deployment error. When DynamoDB
    /// did not say which, every table the commit writes, `a or b`.
    #[error("table {0} does not exist")]
    TableNotFound(String),
    /// The function's role lacks a permission the commit needs
    /// (`AccessDeniedException`): a deployment error.
    #[error("access denied: the role needs {needs}; DynamoDB said: {message}")]
    AccessDenied {
        /// Every permission the request needed, `dynamodb:PutItem on table
        /// idemq, …` (DynamoDB's message names the one it refused).
        needs: String,
        /// DynamoDB's message.
        message: String,
    },
    /// Any other error DynamoDB returned.
    #[error("DynamoDB error: {0}")]
    Service(String),
}

impl CommitError {
    /// The same error for another job that shared the request it came
    /// from (a batch's look-up). A read never makes an
    /// [`Effect`](Self::Effect) error; were one shared, its words are
    /// kept.
    pub(crate) fn shared(&self) -> Self {
        match self {
            Self::Invalid(m) => Self::Invalid(m.clone()),
            Self::TableNotFound(t) => Self::TableNotFound(t.clone()),
            Self::AccessDenied { needs, message } => Self::AccessDenied {
                needs: needs.clone(),
                message: message.clone(),
            },
            other => Self::Service(other.to_string()),
        }
    }
}

/// The job a commit is for.
#[derive(Debug, Clone, Copy)]
pub struct JobRef<'a> {
    /// The job's id.
    pub id: &'a JobId,
    /// The hash of the job's payload.
    pub payload_hash: &'a PayloadHash,
    /// The source queue (name or URL), stored in the marker for operators;
    /// its name is the consumer's namespace unless the layout sets one
    /// ([`TableLayout::namespace_for`](crate::config::TableLayout::namespace_for)).
    pub queue: &'a str,
}

/// A marker as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// The job's id.
    pub job_id: String,
    /// The hash of the payload committed.
    pub payload_hash: PayloadHash,
    /// When it was committed (stored as RFC 3339 with milliseconds); `None`
    /// for a fused marker written by a version that stored no commit time.
    pub committed_at: Option<SystemTime>,
    /// The source queue.
    pub queue: String,
    /// When DynamoDB's TTL may delete it.
    pub expires_at: SystemTime,
}

/// Why a store refused an effect before any I/O: the store's own error,
/// boxed so that the batch and the outcomes know no store.
#[derive(Debug)]
pub struct InvalidEffect(Box<dyn Error + Send + Sync>);

impl InvalidEffect {
    /// Wraps a store's error.
    pub fn new(error: impl Error + Send + Sync + 'static) -> Self {
        Self(Box::new(error))
    }

    /// The store's error, if it is an `E`.
    pub fn downcast_ref<E: Error + 'static>(&self) -> Option<&E> {
        self.0.downcast_ref()
    }
}

impl fmt::Display for InvalidEffect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
