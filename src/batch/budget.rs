//! The deadline budget: when jobs may start, when a running one is
//! abandoned, and by when each kind of work after the handlers must end.

use super::*;

/// When each stage of a batch must be over, from the batch's deadline and
/// its [`BatchConfig::deadline_margin`] `m` (2 s by default):
///
/// | instant | what stops |
/// |---|---|
/// | deadline − m | no job starts ("not attempted", handed back at once) |
/// | deadline − m/2 | a running job is abandoned and retried |
/// | deadline − 3m/8 | optional work: a failure record still unwritten is dropped |
/// | deadline − m/4 | required work: a DLQ send still unfinished is given up, and its message stays on the queue (reported failed) |
/// | deadline − m/8 | visibility changes still unfinished are given up (SQS makes those messages visible when their current timeout ends); [`Processor::process`] returns |
///
/// The last m/8 (250 ms by default) is left for the host to answer
/// (Lambda's runtime API is a local HTTP call). Every call after the
/// handlers is also bounded by a per-call timeout (5 s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// deadline − m: no job starts after this.
    pub start_by: Instant,
    /// deadline − m/2: a job still running is abandoned and retried.
    pub abandon_at: Instant,
    /// deadline − 3m/8: failure records still unwritten are dropped.
    pub optional_by: Instant,
    /// deadline − m/4: DLQ sends still unfinished are given up.
    pub required_by: Instant,
    /// deadline − m/8: visibility changes are given up and the batch answers.
    pub respond_by: Instant,
}

impl Budget {
    /// The stages for a batch due at `deadline` with margin `margin` (an
    /// instant that would come before tokio's clock began is the deadline
    /// itself).
    pub fn new(deadline: Instant, margin: Duration) -> Self {
        let before = |d: Duration| deadline.checked_sub(d).unwrap_or(deadline);
        Self {
            start_by: before(margin),
            abandon_at: before(margin / 2),
            optional_by: before(margin * 3 / 8),
            required_by: before(margin / 4),
            respond_by: before(margin / 8),
        }
    }
}

/// `fut`'s output, or `None` when it has not finished by `by` or within
/// [`CALL_TIMEOUT`]; then it is dropped (never started if `by` has passed).
pub(super) async fn bounded<F: Future>(by: Instant, fut: F) -> Option<F::Output> {
    let now = Instant::now();
    let until = by.min(now + CALL_TIMEOUT);
    if until <= now {
        return None;
    }
    tokio::time::timeout_at(until, fut).await.ok()
}
