//! "Was this a failure, and what does SQS do about it?" — decided in one
//! place, for every way a job can end.

use std::error::Error;
use std::time::Duration;

use crate::commit::{CommitError, CommitOutcome};
use crate::handler::JobError;
use crate::job::InvalidJobId;

/// How one attempt at a job ended, before any decision.
#[derive(Debug)]
pub enum Attempt {
    InvalidJobId(InvalidJobId),
    Undecodable(serde_json::Error),
    Handler(JobError),
    Panicked(String),
    /// The host's deadline came before the job finished.
    TimedOut,
    Commit(Result<CommitOutcome, CommitError>),
}

/// Why a job failed: what failure records and DLQ attributes carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub kind: FailureKind,
    /// One line: the outermost error.
    pub error: String,
    /// The error's `source()` chain, outermost first (without `error`).
    pub chain: Vec<String>,
}

impl Failure {
    /// The error with its chain, `outer: inner: innermost`.
    pub fn full(&self) -> String {
        std::iter::once(self.error.as_str())
            .chain(self.chain.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(": ")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    Transient,
    Permanent,
    /// Same job id, different payload.
    Conflict,
    /// An effect condition failed.
    Rejected,
    Panic,
    Timeout,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Transient => "transient",
            Self::Permanent => "permanent",
            Self::Conflict => "conflict",
            Self::Rejected => "rejected",
            Self::Panic => "panic",
            Self::Timeout => "timeout",
        }
    }
}

/// What SQS does with the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Committed: acknowledge.
    Succeeded,
    /// Committed before: acknowledge, apply nothing.
    Duplicate,
    /// Leave it on the queue with a backoff (or the handler's retry-after);
    /// SQS's redrive takes it to the DLQ after maxReceiveCount receives.
    Retry {
        failure: Failure,
        retry_after: Option<Duration>,
    },
    /// Retrying cannot help: send to the DLQ now with context, acknowledge.
    DeadLetter { failure: Failure },
    /// Never attempted (the deadline was near, or an earlier message of its
    /// FIFO group failed): hand it back at once, with no failure record.
    NotAttempted { why: &'static str },
}

impl Verdict {
    /// Whether the message is reported in `batchItemFailures` (left on the
    /// source queue).
    pub fn stays_on_queue(&self) -> bool {
        matches!(self, Self::Retry { .. } | Self::NotAttempted { .. })
    }
}

/// The one decision: transient things are retried, permanent things are
/// dead-lettered now, commits are acknowledged.
pub fn classify(attempt: Attempt) -> Verdict {
    let retry = |kind, err: &dyn Error, retry_after| Verdict::Retry {
        failure: failure(kind, err),
        retry_after,
    };
    let dead = |kind, err: &dyn Error| Verdict::DeadLetter {
        failure: failure(kind, err),
    };
    match attempt {
        Attempt::InvalidJobId(e) => dead(FailureKind::Permanent, &e),
        Attempt::Undecodable(e) => dead(FailureKind::Permanent, &Undecodable(e)),
        Attempt::Handler(JobError::Transient {
            source,
            retry_after,
        }) => retry(FailureKind::Transient, source.as_ref(), retry_after),
        Attempt::Handler(JobError::Permanent { source }) => {
            dead(FailureKind::Permanent, source.as_ref())
        }
        // A panic may be a bug that a deploy fixes: retried, and SQS's
        // redrive stops it after maxReceiveCount.
        Attempt::Panicked(msg) => retry(
            FailureKind::Panic,
            &Message(format!("handler panicked: {msg}")),
            None,
        ),
        Attempt::TimedOut => retry(
            FailureKind::Timeout,
            &Message("job did not finish before the deadline".into()),
            None,
        ),
        Attempt::Commit(Ok(outcome)) => match outcome {
            CommitOutcome::Committed => Verdict::Succeeded,
            CommitOutcome::Duplicate => Verdict::Duplicate,
            CommitOutcome::Conflict { stored_hash } => dead(
                FailureKind::Conflict,
                &Message(format!(
                    "job id already committed with another payload (stored hash {stored_hash})"
                )),
            ),
            CommitOutcome::Rejected { index, reason } => dead(
                FailureKind::Rejected,
                &Message(format!("effect write {index} condition failed: {reason}")),
            ),
            CommitOutcome::Transient { reason } => {
                retry(FailureKind::Transient, &Message(reason), None)
            }
        },
        Attempt::Commit(Err(e)) => match e {
            CommitError::Effect(_) | CommitError::Invalid(_) => dead(FailureKind::Permanent, &e),
            // A missing table or a denied permission is fixed by a deploy,
            // not by the job: keep retrying until redrive gives up.
            CommitError::TableNotFound(_) | CommitError::Service(_) => {
                retry(FailureKind::Transient, &e, None)
            }
        },
    }
}

fn failure(kind: FailureKind, err: &dyn Error) -> Failure {
    let mut chain = Vec::new();
    let mut next = err.source();
    while let Some(e) = next {
        chain.push(e.to_string());
        next = e.source();
    }
    Failure {
        kind,
        error: err.to_string(),
        chain,
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Message(String);

#[derive(Debug, thiserror::Error)]
#[error("body does not decode as the job type")]
struct Undecodable(#[source] serde_json::Error);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::PayloadHash;

    #[derive(Debug, thiserror::Error)]
    #[error("payment API unavailable")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn transient_handler_errors_retry_with_their_chain() {
        let e = JobError::transient(Outer(std::io::Error::other("connection reset")));
        match classify(Attempt::Handler(e)) {
            Verdict::Retry {
                failure,
                retry_after: None,
            } => {
                assert_eq!(failure.kind, FailureKind::Transient);
                assert_eq!(failure.error, "payment API unavailable");
                assert_eq!(failure.chain, vec!["connection reset".to_string()]);
            }
            other => panic!("{other:?}"),
        }
        let e = JobError::retry_after("rate limited", Duration::from_secs(42));
        assert!(matches!(
            classify(Attempt::Handler(e)),
            Verdict::Retry { retry_after: Some(d), .. } if d == Duration::from_secs(42)
        ));
    }

    #[test]
    fn permanent_things_are_dead_lettered_now() {
        let undecodable = serde_json::from_str::<u32>("\"x\"").unwrap_err();
        for attempt in [
            Attempt::Handler(JobError::permanent("amount must be positive")),
            Attempt::Undecodable(undecodable),
            Attempt::InvalidJobId(InvalidJobId::Empty),
            Attempt::Commit(Err(CommitError::Invalid("bad expression".into()))),
        ] {
            let v = classify(attempt);
            assert!(
                matches!(&v, Verdict::DeadLetter { failure } if failure.kind == FailureKind::Permanent),
                "{v:?}"
            );
            assert!(!v.stays_on_queue());
        }
    }

    #[test]
    fn undecodable_body_keeps_serde_detail_in_the_chain() {
        let e = serde_json::from_str::<u32>("{}").unwrap_err();
        match classify(Attempt::Undecodable(e)) {
            Verdict::DeadLetter { failure } => {
                assert_eq!(failure.error, "body does not decode as the job type");
                assert!(
                    failure.chain[0].contains("invalid type"),
                    "{:?}",
                    failure.chain
                );
                assert!(
                    failure
                        .full()
                        .starts_with("body does not decode as the job type: invalid type")
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn commit_outcomes() {
        assert_eq!(
            classify(Attempt::Commit(Ok(CommitOutcome::Committed))),
            Verdict::Succeeded
        );
        assert_eq!(
            classify(Attempt::Commit(Ok(CommitOutcome::Duplicate))),
            Verdict::Duplicate
        );
        let conflict = classify(Attempt::Commit(Ok(CommitOutcome::Conflict {
            stored_hash: PayloadHash::of(b"a"),
        })));
        assert!(
            matches!(conflict, Verdict::DeadLetter { failure } if failure.kind == FailureKind::Conflict)
        );
        let rejected = classify(Attempt::Commit(Ok(CommitOutcome::Rejected {
            index: 2,
            reason: "no funds".into(),
        })));
        assert!(matches!(&rejected, Verdict::DeadLetter { failure }
            if failure.kind == FailureKind::Rejected && failure.error.contains("write 2")));
        let transient = classify(Attempt::Commit(Ok(CommitOutcome::Transient {
            reason: "TransactionConflict".into(),
        })));
        assert!(transient.stays_on_queue());
        let missing = classify(Attempt::Commit(Err(CommitError::TableNotFound("t".into()))));
        assert!(missing.stays_on_queue());
    }

    #[test]
    fn panics_and_timeouts_are_retried() {
        let v = classify(Attempt::Panicked("index out of bounds".into()));
        assert!(matches!(&v, Verdict::Retry { failure, .. }
            if failure.kind == FailureKind::Panic && failure.error.contains("index out of bounds")));
        assert!(classify(Attempt::TimedOut).stays_on_queue());
    }
}
