//! "Was this a failure, and what does SQS do about it?" — decided in one
//! place, for every way a job can end.

use std::error::Error;
use std::time::Duration;

use crate::commit::{CommitError, CommitOutcome};
use crate::handler::JobError;
use crate::job::InvalidJobId;

use crate::failure::{Failure, FailureKind};

/// How one attempt at a job ended, before any decision.
#[derive(Debug)]
pub(crate) enum Attempt {
    InvalidJobId(InvalidJobId),
    Undecodable(serde_json::Error),
    Handler(JobError),
    /// The handler panicked: its message, and where (when the panic hook
    /// noted it: [`crate::backtrace`]).
    Panicked {
        message: String,
        backtrace: Option<Box<std::backtrace::Backtrace>>,
    },
    /// The host's deadline came before the job finished.
    TimedOut,
    /// First enqueued too long ago for its markers to remember it: not run.
    Expired(crate::horizon::MarkersExpired),
    Commit(Result<CommitOutcome, CommitError>),
}

/// What SQS does with the message.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Committed: acknowledge.
    Succeeded,
    /// Committed before: acknowledge, apply nothing.
    Duplicate,
    /// Leave it on the queue with a backoff (or the handler's retry-after);
    /// SQS's redrive takes it to the DLQ after maxReceiveCount receives.
    Retry {
        /// Why it failed.
        failure: Failure,
        /// The handler's own delay ([`JobError::retry_after`](crate::JobError::retry_after)), if any.
        retry_after: Option<Duration>,
    },
    /// Retrying cannot help: send to the DLQ now with context, acknowledge.
    DeadLetter {
        /// Why it failed.
        failure: Failure,
    },
    /// Never attempted (the deadline was near, or an earlier message of its
    /// FIFO group failed): hand it back at once, with no failure record.
    NotAttempted {
        /// Which of the two.
        why: &'static str,
    },
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
pub(crate) fn classify(attempt: Attempt) -> Verdict {
    let retry = |kind, err: &(dyn Error + 'static), retry_after| Verdict::Retry {
        failure: failure(kind, err),
        retry_after,
    };
    let dead = |kind, err: &(dyn Error + 'static)| Verdict::DeadLetter {
        failure: failure(kind, err),
    };
    match attempt {
        Attempt::InvalidJobId(e) => dead(FailureKind::Permanent, &e),
        Attempt::Undecodable(e) => {
            dead(FailureKind::Permanent, &Undecodable(DecodeDetail::from(&e)))
        }
        Attempt::Handler(JobError::Transient {
            source,
            retry_after,
            backtrace,
        }) => Verdict::Retry {
            failure: failure(FailureKind::Transient, source.as_ref()).at(backtrace.as_deref()),
            retry_after,
        },
        Attempt::Handler(JobError::Permanent { source, backtrace }) => Verdict::DeadLetter {
            failure: failure(FailureKind::Permanent, source.as_ref()).at(backtrace.as_deref()),
        },
        // A panic may be a bug that a deploy fixes: retried, and SQS's
        // redrive stops it after maxReceiveCount.
        Attempt::Panicked { message, backtrace } => Verdict::Retry {
            failure: failure(
                FailureKind::Panic,
                &Message(format!("handler panicked: {message}")),
            )
            .at(backtrace.as_deref()),
            retry_after: None,
        },
        // Running it could apply it twice: an operator decides.
        Attempt::Expired(e) => dead(FailureKind::Expired, &e),
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
            // Only what is left after the in-invocation re-runs
            // (`Processor` re-runs a contended job first): back off.
            CommitOutcome::Contended { index, reason } => retry(
                FailureKind::Contended,
                &Message(format!(
                    "lost optimistic-concurrency races on effect write {index}: {reason}"
                )),
                None,
            ),
            // Likewise what is left of races lost to concurrent
            // transactions.
            CommitOutcome::Collided { reason } => retry(
                FailureKind::Contended,
                &Message(format!(
                    "lost races to concurrent transactions on the same items: {reason}"
                )),
                None,
            ),
        },
        Attempt::Commit(Err(e)) => match e {
            CommitError::Effect(_) | CommitError::Invalid(_) => dead(FailureKind::Permanent, &e),
            // A missing table or a denied permission is fixed by a deploy,
            // not by the job: retried, so nothing is lost meanwhile, but
            // recorded as what it is (not as a transient failure whose
            // retries ran out) and alarmed on at the first one.
            CommitError::TableNotFound(_) | CommitError::AccessDenied { .. } => {
                retry(FailureKind::Deployment, &e, None)
            }
            CommitError::Service(_) => retry(FailureKind::Transient, &e, None),
        },
    }
}

/// The first pause before re-running a job that lost an
/// optimistic-concurrency race; it doubles with each further lost race.
pub(crate) const CONTENTION_PAUSE_BASE: Duration = Duration::from_millis(5);
/// The longest pause between two runs of a contended job.
pub(crate) const CONTENTION_PAUSE_CAP: Duration = Duration::from_millis(100);

/// The pause before running a job again after its `lost`-th lost race
/// (1-based) in this invocation: full jitter, uniform in `[0,
/// min(100 ms, 5 ms · 2^(lost-1))]`. Short enough to stay inside one
/// invocation's budget, random so that racers who collided do not collide
/// again in lockstep.
pub(crate) fn contention_pause<R: rand::Rng + ?Sized>(lost: u32, rng: &mut R) -> Duration {
    use rand::RngExt;
    let ceiling = CONTENTION_PAUSE_BASE
        .saturating_mul(1 << lost.saturating_sub(1).min(16))
        .min(CONTENTION_PAUSE_CAP);
    let top = u64::try_from(ceiling.as_micros()).unwrap_or(u64::MAX);
    Duration::from_micros(rng.random_range(0..=top))
}

/// Runs one attempt at a job (`run`: handler then commit) and, while its
/// commit is a lost race ([`CommitOutcome::Contended`], or
/// [`CommitOutcome::Collided`]: cancelled by a concurrent transaction on
/// one of its items), runs it again after a [`contention_pause`]: at most
/// `retries` times, and never once the run could no longer start before
/// `start_by` (the batch's
/// [`Budget::start_by`](crate::batch::Budget::start_by), after which no job
/// starts). What is left is classified as usual (a lost race becomes a
/// retry with backoff). Every lost race adds one to `lost`
/// (`JobsContended`).
///
/// Re-running here rather than handing the message back with visibility 0
/// keeps the message's receive count: under contention a job that lost a
/// few races would otherwise climb to `maxReceiveCount` and be redriven to
/// the DLQ, the failure this exists to avoid. It also costs no SQS calls
/// and no receive round trip; the price is the handler's re-reads and a
/// few milliseconds of pause inside the invocation, bounded by the budget.
pub(crate) async fn rerun_lost_races<F, Fut>(
    retries: u32,
    start_by: tokio::time::Instant,
    lost: &std::sync::atomic::AtomicU64,
    mut run: F,
) -> Result<Result<CommitOutcome, CommitError>, Attempt>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Result<CommitOutcome, CommitError>, Attempt>>,
{
    let mut lost_here = 0u32;
    loop {
        let commit = run().await?;
        let what = match &commit {
            Ok(CommitOutcome::Contended { index, .. }) => {
                format!("an optimistic-concurrency race on effect write {index}")
            }
            Ok(CommitOutcome::Collided { reason }) => reason.clone(),
            _ => return Ok(commit),
        };
        lost.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        lost_here += 1;
        if lost_here > retries {
            return Ok(commit);
        }
        let pause = crate::clock::with_jitter(|rng| contention_pause(lost_here, rng));
        if tokio::time::Instant::now() + pause >= start_by {
            return Ok(commit);
        }
        tracing::info!(
            lost = lost_here,
            race = what,
            pause_ms = pause.as_millis() as u64,
            "lost a race; running the job again"
        );
        tokio::time::sleep(pause).await;
    }
}

fn failure(kind: FailureKind, err: &(dyn Error + 'static)) -> Failure {
    let mut chain = Vec::new();
    let mut next = err.source();
    while let Some(e) = next {
        chain.push(text(e));
        next = e.source();
    }
    Failure {
        kind,
        error: text(err),
        chain,
        backtrace: None,
    }
}

impl Failure {
    /// This failure, with where it happened (rendered and capped as a
    /// failure record keeps it).
    fn at(mut self, backtrace: Option<&std::backtrace::Backtrace>) -> Self {
        self.backtrace = backtrace
            .and_then(|bt| crate::backtrace::render(bt, crate::backtrace::MAX_RECORD_BACKTRACE));
        self
    }
}

/// An error's text as failure records keep it: a `serde_json::Error` (a
/// handler's `?` on its own decoding) quotes the values it choked on, so it
/// is kept as its [`DecodeDetail`] only.
fn text(err: &(dyn Error + 'static)) -> String {
    match err.downcast_ref::<serde_json::Error>() {
        Some(json) => DecodeDetail::from(json).to_string(),
        None => err.to_string(),
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Message(String);

#[derive(Debug, thiserror::Error)]
#[error("body does not decode as the job type")]
struct Undecodable(#[source] DecodeDetail);

/// A serde_json decode error without the payload. serde's messages quote
/// the offending value (`invalid type: string "…"`, `unknown variant `…``,
/// `unknown field `…``), and this text is kept in the failure record, the
/// `idemq-error` attribute and `idemq dlq` output, so only the class, the
/// position and words that come from the job *type* are kept: the kind of
/// value found (`string`, `map`, …), what the type expected, a missing field's
/// name. Never the value, nor an unknown key (a payload may use secrets as
/// keys).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct DecodeDetail(String);

impl From<&serde_json::Error> for DecodeDetail {
    fn from(e: &serde_json::Error) -> Self {
        use serde_json::error::Category;
        let class = match e.classify() {
            Category::Io => "I/O error",
            Category::Syntax => "syntax error",
            Category::Data => "data error",
            Category::Eof => "unexpected end of input",
        };
        let mut text = format!("{class} at line {} column {}", e.line(), e.column());
        if e.classify() == Category::Data {
            let full = e.to_string();
            let suffix = format!(" at line {} column {}", e.line(), e.column());
            let message = full.strip_suffix(&suffix).unwrap_or(&full);
            if let Some(detail) = data_detail(message) {
                text.push_str(": ");
                text.push_str(&detail);
            }
        }
        Self(text)
    }
}

/// What of a serde data error's message is safe to keep (see [`DecodeDetail`]).
fn data_detail(message: &str) -> Option<String> {
    // Field names in these come from the type's declaration.
    for prefix in ["missing field `", "duplicate field `"] {
        if let Some(name) = message
            .strip_prefix(prefix)
            .and_then(|r| r.strip_suffix('`'))
            && is_identifier(name)
        {
            return Some(message.to_owned());
        }
    }
    let (label, rest) = [
        "invalid type: ",
        "invalid value: ",
        "invalid length ",
        "unknown variant ",
        "unknown field ",
    ]
    .into_iter()
    .find_map(|p| {
        message
            .strip_prefix(p)
            .map(|rest| (p.trim_end_matches([':', ' ']), rest))
    })?;
    // serde's own kinds of value (serde::de::Unexpected), never the value.
    const KINDS: [&str; 17] = [
        "string",
        "integer",
        "floating point",
        "boolean",
        "character",
        "byte array",
        "unit value",
        "Option value",
        "newtype struct",
        "sequence",
        "map",
        "enum",
        "unit variant",
        "newtype variant",
        "tuple variant",
        "struct variant",
        "null",
    ];
    let got = matches!(label, "invalid type" | "invalid value")
        .then(|| {
            KINDS
                .into_iter()
                .find(|k| rest.starts_with(k) && rest[k.len()..].starts_with([' ', ',']))
        })
        .flatten();
    // The expectation is the last ", expected …": a value containing those
    // words comes before it. An unknown key or variant without one ("there
    // are no fields") must not borrow one from inside the value, so there
    // it must read as a list of names.
    let expected = rest
        .rsplit_once(", expected ")
        .map(|(_, e)| e)
        .filter(|e| !e.contains('"'))
        .filter(|e| !label.starts_with("unknown") || is_name_list(e));
    Some(match (got, expected) {
        (Some(g), Some(e)) => format!("{label} (got {g}, expected {e})"),
        (Some(g), None) => format!("{label} (got {g})"),
        (None, Some(e)) => format!("{label} (expected {e})"),
        (None, None) => label.to_owned(),
    })
}

fn is_identifier(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '$' | '@'))
}

/// serde's list of expected names: "`a`", "`a` or `b`", "one of `a`, `b`, `c`".
fn is_name_list(s: &str) -> bool {
    let s = s.strip_prefix("one of ").unwrap_or(s);
    s.split(", ")
        .flat_map(|part| part.split(" or "))
        .all(|name| {
            name.strip_prefix('`')
                .and_then(|n| n.strip_suffix('`'))
                .is_some_and(is_identifier)
        })
}

#[cfg(test)]
mod tests;
