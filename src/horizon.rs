//! How long after its first enqueue a job can still be applied once.
//!
//! A job's dedup marker is committed no earlier than the job's first copy
//! was enqueued, and DynamoDB's TTL may delete it a marker TTL after its
//! commit. So until `first enqueued + marker TTL` the marker of any earlier
//! commit still exists, and after it nothing remembers the job. Every copy
//! of a job (idemq's own dead letter, a redrive, an import) starts SQS's
//! retention and `SentTimestamp` again, which is why each copy carries its
//! job's first-enqueued time
//! ([`FIRST_ENQUEUED_ATTRIBUTE`](crate::job::FIRST_ENQUEUED_ATTRIBUTE)),
//! and two rules are weighed against it:
//! - the consumer runs no job whose first enqueue is a marker TTL ago or
//!   more ([`check_markers_remember`]): it dead-letters it with kind
//!   `expired` instead;
//! - the tools that make a copy (`idemq dlq redrive`, `idemq dlq import`)
//!   leave in the DLQ every letter past the [`ReplayHorizon`], the marker
//!   TTL less a margin to process the copy in, unless the operator forces
//!   it; a forced copy is stamped as enqueued now, a new job as far as the
//!   consumer can tell.

use std::time::{Duration, SystemTime};

use crate::config::{DEFAULT_MARKER_TTL, REPLAY_WINDOW};

/// The flag with which an operator sends letters past the horizon anyway.
pub const ALLOW_EXPIRED_FLAG: &str = "--allow-expired-markers";

/// How long ago `first_enqueued` was at `now`; zero if it is ahead of this
/// host's clock.
pub fn age(first_enqueued: SystemTime, now: SystemTime) -> Duration {
    now.duration_since(first_enqueued).unwrap_or_default()
}

fn rfc3339(t: SystemTime) -> humantime::Rfc3339Timestamp {
    humantime::format_rfc3339_millis(t)
}

/// Rounded to the second: an age in milliseconds reads as noise.
fn human(d: Duration) -> humantime::FormattedDuration {
    humantime::format_duration(Duration::from_secs(d.as_secs()))
}

/// A job first enqueued a marker TTL ago or more: the marker of an earlier
/// commit may be gone, so running it could apply it a second time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "job first enqueued at {first} ({age} ago), no later than the marker TTL {ttl} \
     (IDEMQ_MARKER_TTL) allows: a marker of an earlier commit may have expired, so it \
     was not run (it could apply twice); dead-lettered. To apply it anyway, run \
     `idemq dlq redrive {flag}` (it may apply twice); to keep later jobs from expiring, \
     raise IDEMQ_MARKER_TTL",
    first = rfc3339(*first_enqueued),
    age = human(*age),
    ttl = human(*marker_ttl),
    flag = ALLOW_EXPIRED_FLAG,
)]
pub struct MarkersExpired {
    /// When the job's first copy was enqueued.
    pub first_enqueued: SystemTime,
    /// Its age when it was refused.
    pub age: Duration,
    /// The consumer's marker TTL.
    pub marker_ttl: Duration,
}

/// The consumer's rule: a job is run only while the markers of its earlier
/// commits must still exist, that is while its age is under `marker_ttl`.
/// No margin is needed: a commit happens no earlier than the first enqueue,
/// and its marker lives at least the TTL. A message that says nothing of
/// its age (`None`) is run.
pub fn check_markers_remember(
    first_enqueued: Option<SystemTime>,
    now: SystemTime,
    marker_ttl: Duration,
) -> Result<(), MarkersExpired> {
    let Some(first_enqueued) = first_enqueued else {
        return Ok(());
    };
    let age = age(first_enqueued, now);
    if age >= marker_ttl {
        return Err(MarkersExpired {
            first_enqueued,
            age,
            marker_ttl,
        });
    }
    Ok(())
}

/// How old a letter may be for a tool to send a copy of it: the marker TTL
/// less a margin in which the copy must be received and processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayHorizon {
    /// The consumer's marker TTL (`IDEMQ_MARKER_TTL`).
    pub marker_ttl: Duration,
    /// Time left for the copy to be processed before the markers of the
    /// job may expire; [`REPLAY_WINDOW`] (one day) by default.
    pub margin: Duration,
}

impl Default for ReplayHorizon {
    fn default() -> Self {
        Self::new(DEFAULT_MARKER_TTL)
    }
}

impl ReplayHorizon {
    /// The horizon of a consumer whose markers live `marker_ttl`, with the
    /// default margin of one day.
    pub const fn new(marker_ttl: Duration) -> Self {
        Self {
            marker_ttl,
            margin: REPLAY_WINDOW,
        }
    }

    /// This horizon with another margin.
    pub const fn with_margin(mut self, margin: Duration) -> Self {
        self.margin = margin;
        self
    }

    /// The oldest a copied job may be.
    pub fn limit(&self) -> Duration {
        self.marker_ttl.saturating_sub(self.margin)
    }

    /// Whether a job first enqueued at `first_enqueued` may be copied at
    /// `now`.
    pub fn check(&self, first_enqueued: SystemTime, now: SystemTime) -> Result<(), PastHorizon> {
        let age = age(first_enqueued, now);
        if age >= self.limit() {
            return Err(PastHorizon {
                first_enqueued,
                age,
                horizon: *self,
            });
        }
        Ok(())
    }
}

/// A letter too old to be copied safely: its job's markers may expire
/// before the copy is processed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "first enqueued at {first}, {age} ago: past the replay horizon of {limit} (marker TTL {ttl} \
     less {margin} to process the copy), so its marker may be gone before the copy is \
     processed and the job applied twice; left in the DLQ (pass {flag} to send it anyway, \
     as a new job that may apply twice)",
    first = rfc3339(*first_enqueued),
    age = human(*age),
    limit = human(horizon.limit()),
    ttl = human(horizon.marker_ttl),
    margin = human(horizon.margin),
    flag = ALLOW_EXPIRED_FLAG,
)]
pub struct PastHorizon {
    /// When the job's first copy was enqueued.
    pub first_enqueued: SystemTime,
    /// Its age when it was judged.
    pub age: Duration,
    /// The horizon it is past.
    pub horizon: ReplayHorizon,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    const DAY: Duration = Duration::from_secs(86_400);

    #[test]
    fn the_consumer_refuses_a_job_from_its_marker_ttl_on() {
        let first = UNIX_EPOCH + 1000 * DAY;
        let ttl = 21 * DAY;
        let at = |d: Duration| first + d;
        assert_eq!(
            check_markers_remember(Some(first), at(ttl - DAY), ttl),
            Ok(())
        );
        let just_before = ttl - Duration::from_millis(1);
        assert_eq!(
            check_markers_remember(Some(first), at(just_before), ttl),
            Ok(())
        );
        let refused = check_markers_remember(Some(first), at(ttl), ttl).unwrap_err();
        assert_eq!(refused.age, ttl);
        let text = refused.to_string();
        for needle in [
            "1972-09-27T00:00:00.000Z",
            "21days ago",
            "IDEMQ_MARKER_TTL",
            ALLOW_EXPIRED_FLAG,
        ] {
            assert!(text.contains(needle), "{needle}: {text}");
        }
        // Ahead of this host's clock, or silent on its age: run.
        assert_eq!(check_markers_remember(Some(at(DAY)), first, ttl), Ok(()));
        assert_eq!(check_markers_remember(None, at(100 * DAY), ttl), Ok(()));
    }

    #[test]
    fn the_tools_keep_a_margin_to_process_the_copy() {
        let horizon = ReplayHorizon::new(21 * DAY);
        assert_eq!(horizon.limit(), 20 * DAY);
        let first = UNIX_EPOCH + 1000 * DAY;
        assert_eq!(horizon.check(first, first + 20 * DAY - DAY / 24), Ok(()));
        let past = horizon.check(first, first + 20 * DAY).unwrap_err();
        let text = past.to_string();
        for needle in [
            "20days ago",
            "replay horizon of 20days",
            "marker TTL 21days",
            "less 1day",
            ALLOW_EXPIRED_FLAG,
        ] {
            assert!(text.contains(needle), "{needle}: {text}");
        }
        // A margin longer than the TTL refuses everything, never underflows.
        let tight = ReplayHorizon::new(DAY).with_margin(2 * DAY);
        assert_eq!(tight.limit(), Duration::ZERO);
        assert!(tight.check(first, first).is_err());
        assert_eq!(ReplayHorizon::default().marker_ttl, DEFAULT_MARKER_TTL);
    }
}
