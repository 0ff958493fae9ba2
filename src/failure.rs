//! Why a job failed, and the record idemq keeps of it: what every store
//! writes and reads back, and what the dead-letter tools show.
//!
//! A leaf module (it imports no other module of the batch or of a store),
//! so that a store can speak of failures without depending on the batch
//! that classifies them.

use std::time::SystemTime;

pub use crate::backtrace::{BacktraceMode, MAX_RECORD_BACKTRACE};

/// Why a job failed: what failure records and DLQ attributes carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// What kind of failure, as stored and shown.
    pub kind: FailureKind,
    /// One line: the outermost error.
    pub error: String,
    /// The error's `source()` chain, outermost first (without `error`).
    pub chain: Vec<String>,
    /// Where it failed, for a handler's error or panic: the frames of the
    /// user's code first, the rest folded, at most
    /// [`MAX_RECORD_BACKTRACE`] bytes, as [`BacktraceMode`] captures it.
    /// `None` when none was captured
    /// (`IDEMQ_BACKTRACE=off`, a failure of idemq's own such as a
    /// conflict, or a record written before records kept it).
    pub backtrace: Option<String>,
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

/// The kind of a [`Failure`]: what a failure record's `kind` and
/// `idemq dlq` show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureKind {
    /// A transient handler error, a throttled or conflicting transaction, a
    /// missing table: retried.
    Transient,
    /// An undecodable payload, an invalid job id, a handler's permanent
    /// error: dead-lettered at once.
    Permanent,
    /// Same job id, different payload.
    Conflict,
    /// An effect condition failed.
    Rejected,
    /// The handler panicked: retried (a deploy may fix it).
    Panic,
    /// The job did not finish before the batch's deadline: retried.
    Timeout,
    /// The job lost an optimistic-concurrency race (a
    /// [`Write::optimistic`](crate::store::dynamodb::Write::optimistic) condition
    /// failed) more times in one invocation than
    /// [`BatchConfig::contention_retries`](crate::config::BatchConfig::contention_retries)
    /// allows, or lost races to concurrent transactions on its items
    /// (`TransactionConflict`) as often: retried with backoff, like a
    /// transient failure.
    Contended,
    /// The deployment, not the job: the function's role lacks a permission
    /// on a table the commit writes, or the table does not exist. Every job
    /// fails alike until a deploy fixes it; retried with backoff (nothing
    /// is lost meanwhile), counted as `JobsMisconfigured` and logged as an
    /// error.
    Deployment,
    /// The job was first enqueued a marker TTL ago or more
    /// ([`crate::horizon`]): the marker of an earlier commit may have
    /// expired, so it is not run but dead-lettered at once, counted as
    /// `JobsExpired`. Only an operator can decide to apply it anyway.
    Expired,
}

impl FailureKind {
    /// Every kind, in [`as_str`](Self::as_str)'s order.
    pub const ALL: [Self; 9] = [
        Self::Transient,
        Self::Permanent,
        Self::Conflict,
        Self::Rejected,
        Self::Panic,
        Self::Timeout,
        Self::Contended,
        Self::Deployment,
        Self::Expired,
    ];

    /// The kind's name as stored in failure records: `transient`,
    /// `permanent`, `conflict`, `rejected`, `panic`, `timeout`,
    /// `contended`, `deployment`, `expired`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Transient => "transient",
            Self::Permanent => "permanent",
            Self::Conflict => "conflict",
            Self::Rejected => "rejected",
            Self::Panic => "panic",
            Self::Timeout => "timeout",
            Self::Contended => "contended",
            Self::Deployment => "deployment",
            Self::Expired => "expired",
        }
    }

    /// The kind stored as `name` ([`as_str`](Self::as_str)), if any.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

/// A dead letter as [`Records::read_many`](crate::dlq::records::Records::read_many) looks it up: its job id (if
/// it has one) and its message id.
pub type LetterKey = (Option<String>, String);

/// Longest `error`, and longest entry of `error_chain`, in a failure
/// record, in bytes.
pub const MAX_RECORD_ERROR: usize = 8 * 1024;
/// Most bytes of `error_chain` in a failure record. With the error and the
/// other fields (ids up to 512 bytes each, a queue name, a hash) the item
/// stays far below DynamoDB's 400 KB item limit
/// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Constraints.html#limits-items>),
/// so an error chain of any length can never make the PutItem fail.
pub const MAX_RECORD_CHAIN: usize = 64 * 1024;

/// An error of the dead-letter tools or of a failure record write.
#[derive(Debug, thiserror::Error)]
pub enum DlqError {
    /// A DynamoDB call failed (failure records).
    #[error("DynamoDB: {0}")]
    DynamoDb(String),
    /// A store's call failed (failure records outside DynamoDB).
    #[error("{0}")]
    Store(String),
    /// An SQS call failed.
    #[error("SQS: {0}")]
    Sqs(String),
    /// The message alone (body, producer attributes, `idemq-job-id`) is
    /// over the DLQ's `MaximumMessageSize`.
    #[error(
        "message {message_id} is {bytes} bytes without its dead-letter context; the DLQ takes at most {limit}"
    )]
    TooLarge {
        /// The message's `MessageId`.
        message_id: String,
        /// Its size as SQS counts it.
        bytes: usize,
        /// The DLQ's `MaximumMessageSize`.
        limit: usize,
    },
}

impl From<crate::queue::QueueError> for DlqError {
    fn from(e: crate::queue::QueueError) -> Self {
        match e {
            crate::queue::QueueError::Sqs(s) => Self::Sqs(s),
            other => Self::Sqs(other.to_string()),
        }
    }
}

/// One failed attempt, as stored under `idemq#ns#<namespace>#failure#<job
/// id>` ([`TableLayout::failure_key`](crate::config::TableLayout::failure_key); the latest
/// attempt overwrites the one before, so the record says how the job last
/// failed and how many times).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureRecord {
    /// The job id, or `None` when the message had no valid one.
    pub job_id: Option<String>,
    /// The message's `MessageId`.
    pub message_id: String,
    /// This attempt's number (`ApproximateReceiveCount`).
    pub attempt: u32,
    /// Why it failed.
    pub failure: Failure,
    /// When it failed.
    pub failed_at: SystemTime,
    /// The source queue's name.
    pub source_queue: String,
    /// SHA-256 of the body, hex: the payload itself is never stored.
    pub payload_hash: String,
    /// Which deploy of the consumer failed ([`deploy`]): empty in a
    /// record written before records named it.
    pub deploy: String,
    /// The idemq version of the consumer that failed
    /// ([`IDEMQ_VERSION`]): empty in a record written before records
    /// named it.
    pub idemq_version: String,
}

/// The version of idemq compiled into this program, as failure records
/// and dead letters name it.
pub const IDEMQ_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Which deploy of the consumer this process runs, as its failure records
/// and dead letters name it, so that a burst of failures can be told to
/// line up with a deploy (or not):
///
/// - `IDEMQ_DEPLOY`, when set: the user's own name for the build (a git
///   commit, a release tag). A worker has nothing else to go by.
/// - else, on Lambda, the function version Lambda runs
///   (`AWS_LAMBDA_FUNCTION_VERSION`, one of Lambda's reserved variables,
///   <https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html#configuration-envvars-runtime>):
///   a published version's number (an alias invokes the version it points
///   to, so SAM's `AutoPublishAlias` gives one number per code change), or
///   `$LATEST`, which is the same for every deploy: set `IDEMQ_DEPLOY`
///   when the function is invoked unpublished.
/// - else empty: the records do not say.
///
/// Read from the environment once per process.
pub fn deploy() -> &'static str {
    static DEPLOY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DEPLOY.get_or_init(|| deploy_from(|name| std::env::var(name).ok()))
}

/// [`deploy`] from `var` (the environment, or a test's).
fn deploy_from(var: impl Fn(&str) -> Option<String>) -> String {
    let set = |name: &str| {
        var(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    set(DEPLOY_ENV_VAR)
        .or_else(|| set("AWS_LAMBDA_FUNCTION_VERSION"))
        .map(|v| truncate(&v, MAX_DEPLOY))
        .unwrap_or_default()
}

/// The variable that names the deploy ([`deploy`]).
pub(crate) const DEPLOY_ENV_VAR: &str = "IDEMQ_DEPLOY";

/// The most bytes of a deploy's name a record keeps.
const MAX_DEPLOY: usize = 128;

/// `s` cut to at most `max` bytes (at a character boundary) plus a marker
/// saying so and how long it was.
pub(crate) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [cut: {} bytes]", &s[..end], s.len())
}

/// The error chain as stored: each entry capped at [`MAX_RECORD_ERROR`]
/// bytes, the whole at about [`MAX_RECORD_CHAIN`]. When entries must go,
/// the outermost ones and the innermost (usually the root cause) are kept,
/// and one entry in their place says how many were left out.
pub(crate) fn capped_chain(chain: &[String]) -> Vec<String> {
    // DynamoDB counts a list element as its bytes plus one.
    let cost = |e: &String| e.len() + 1;
    let capped: Vec<String> = chain
        .iter()
        .map(|e| truncate(e, MAX_RECORD_ERROR))
        .collect();
    if capped.iter().map(cost).sum::<usize>() <= MAX_RECORD_CHAIN {
        return capped;
    }
    const MARKER_ROOM: usize = 64;
    let last = capped.last().cloned().unwrap_or_default();
    let mut budget = MAX_RECORD_CHAIN - MARKER_ROOM - cost(&last);
    let mut kept = Vec::new();
    for e in &capped[..capped.len() - 1] {
        if cost(e) > budget {
            break;
        }
        budget -= cost(e);
        kept.push(e.clone());
    }
    let left_out = capped.len() - 1 - kept.len();
    kept.push(format!("… {left_out} more causes left out (chain capped)"));
    kept.push(last);
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deploy_with(vars: &[(&str, &str)]) -> String {
        deploy_from(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn the_deploy_is_the_users_name_else_the_lambda_version_else_unsaid() {
        assert_eq!(
            deploy_with(&[
                ("IDEMQ_DEPLOY", "git 3f2a9c1"),
                ("AWS_LAMBDA_FUNCTION_VERSION", "7")
            ]),
            "git 3f2a9c1"
        );
        assert_eq!(
            deploy_with(&[("IDEMQ_DEPLOY", " "), ("AWS_LAMBDA_FUNCTION_VERSION", "7")]),
            "7"
        );
        assert_eq!(
            deploy_with(&[("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")]),
            "$LATEST"
        );
        assert_eq!(deploy_with(&[]), "");
        let long = "x".repeat(1000);
        let kept = deploy_with(&[("IDEMQ_DEPLOY", &long)]);
        assert!(
            kept.starts_with(&"x".repeat(MAX_DEPLOY)) && kept.len() < 200,
            "{kept}"
        );
    }
}
