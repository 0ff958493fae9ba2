//! Retry delays: exponential backoff with full jitter, as a pure function.
//!
//! idemq never sleeps inside Lambda to retry: a sleeping invocation is billed
//! and holds the whole batch. SQS already redelivers a message once its
//! visibility timeout runs out, so a transient failure is retried by setting
//! that message's visibility with `ChangeMessageVisibility` to the delay
//! computed here and reporting it in `batchItemFailures`.
//!
//! The delay is *full jitter* — uniform in `[0, min(cap, base * 2^(n-1))]`
//! where `n` is the message's `ApproximateReceiveCount` — because a burst of
//! failures (a throttled dependency, a deploy) otherwise comes back as a
//! burst at the same instant. Spreading each retry over the whole window
//! ("Exponential Backoff And Jitter", AWS Architecture Blog) cuts both the
//! collisions and the total number of calls compared with plain doubling.
//!
//! The random source is a parameter so tests can seed it, and nothing here
//! reads a clock: the caller passes how long the message has been in flight,
//! and the batch rounds the delay up to whole seconds and keeps the total
//! under SQS's 12-hour limit ([`MAX_IN_FLIGHT`]).
//!
//! ```
//! use std::time::Duration;
//! use idemq::backoff::Backoff;
//!
//! let backoff = Backoff::new().validate().unwrap();
//! // Third receive: the ceiling is 2 s * 2^2 = 8 s.
//! let delay = backoff.delay(3, &mut rand::rng());
//! assert!(delay <= Duration::from_secs(8));
//! ```

use std::time::Duration;

use rand::{Rng, RngExt};

/// SQS limits a message's visibility to 12 h from the receive that returned
/// its receipt handle; a `ChangeMessageVisibility` past that is rejected.
pub const MAX_IN_FLIGHT: Duration = Duration::from_secs(12 * 3600);

/// Room kept below [`MAX_IN_FLIGHT`]: the caller's "in flight so far" is
/// measured on its own clock, and the request takes time to reach SQS.
pub(crate) const IN_FLIGHT_SAFETY_MARGIN: Duration = Duration::from_secs(5);

/// Exponential backoff with full jitter: base delay and cap.
///
/// Builders are `const` so a policy can be a constant; [`Backoff::validate`]
/// checks it. An unvalidated policy still never panics or overflows: its
/// ceiling is simply `min(cap, base * 2^(n-1))` whatever the values.
///
/// ```
/// use std::time::Duration;
/// use idemq::backoff::Backoff;
///
/// const RETRY: Backoff = Backoff::new()
///     .with_base(Duration::from_millis(500))
///     .with_cap(Duration::from_secs(60));
/// let retry = RETRY.validate().unwrap();
/// assert_eq!(retry.ceiling(1), Duration::from_millis(500));
/// assert_eq!(retry.ceiling(4), Duration::from_secs(4));
/// assert_eq!(retry.ceiling(9), Duration::from_secs(60)); // 128 s, capped
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
}

impl Backoff {
    /// Base 2 s, cap 15 min: with SQS's default `maxReceiveCount` of 6 a
    /// message gets ceilings of 2, 4, 8, 16 and 32 s before it is
    /// dead-lettered, and a larger `maxReceiveCount` tops out at 15 min.
    pub const DEFAULT: Backoff = Backoff {
        base: Duration::from_secs(2),
        cap: Duration::from_secs(15 * 60),
    };

    /// The [`DEFAULT`](Self::DEFAULT) policy.
    pub const fn new() -> Self {
        Self::DEFAULT
    }

    /// The ceiling of the first retry (receive count 1).
    pub const fn with_base(self, base: Duration) -> Self {
        Self { base, ..self }
    }

    /// The largest ceiling, whatever the receive count.
    pub const fn with_cap(self, cap: Duration) -> Self {
        Self { cap, ..self }
    }

    /// Checks `base > 0`, `cap >= base` and `cap <= 12 h` (a longer delay
    /// could never be set as a visibility timeout).
    pub fn validate(self) -> Result<Self, InvalidBackoff> {
        if self.base.is_zero() {
            return Err(InvalidBackoff::ZeroBase);
        }
        if self.cap < self.base {
            return Err(InvalidBackoff::CapBelowBase {
                base: self.base,
                cap: self.cap,
            });
        }
        if self.cap > MAX_IN_FLIGHT {
            return Err(InvalidBackoff::CapOverTwelveHours { cap: self.cap });
        }
        Ok(self)
    }

    /// The delay's ceiling on the first receive.
    pub fn base(&self) -> Duration {
        self.base
    }

    /// The longest delay, whatever the receive count.
    pub fn cap(&self) -> Duration {
        self.cap
    }

    /// `min(cap, base * 2^(receive_count-1))`, the top of the jitter window.
    ///
    /// `receive_count` is SQS's `ApproximateReceiveCount`, which is 1 on the
    /// first delivery; 0 (absent or unparsable) is treated as 1. Saturates
    /// instead of overflowing for every `u32`.
    pub fn ceiling(&self, receive_count: u32) -> Duration {
        let base = self.base.as_nanos();
        if base == 0 {
            return Duration::ZERO;
        }
        let doublings = receive_count.saturating_sub(1);
        // Past 2^127 the factor does not fit a u128, and any non-zero base
        // has long passed any cap by then.
        let grown = match 1u128.checked_shl(doublings) {
            Some(factor) => base.saturating_mul(factor),
            None => u128::MAX,
        };
        if grown >= self.cap.as_nanos() {
            return self.cap;
        }
        // `grown` is below a `Duration`'s nanoseconds, so both parts fit.
        const NANOS_PER_SEC: u128 = 1_000_000_000;
        Duration::new(
            (grown / NANOS_PER_SEC) as u64,
            (grown % NANOS_PER_SEC) as u32,
        )
    }

    /// Full jitter: uniform in `[0, ceiling(receive_count)]`, drawn from `rng`.
    ///
    /// Pass `&mut rand::rng()` in production and a seeded generator in tests.
    pub fn delay<R: Rng + ?Sized>(&self, receive_count: u32, rng: &mut R) -> Duration {
        let ceiling = self.ceiling(receive_count);
        // Nanosecond resolution, so short ceilings still spread; a u64 of
        // nanoseconds is 584 years, far past any cap that validates.
        let top = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rng.random_range(0..=top))
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Why a [`Backoff`] was rejected by [`Backoff::validate`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidBackoff {
    /// The base is zero: every delay would be zero.
    #[error("backoff base must be greater than zero")]
    ZeroBase,
    /// The cap is below the base.
    #[error(
        "backoff cap ({}) is below its base ({})",
        humantime::format_duration(*.cap),
        humantime::format_duration(*.base)
    )]
    CapBelowBase {
        /// The policy's base.
        base: Duration,
        /// The policy's cap.
        cap: Duration,
    },
    /// The cap is over SQS's 12 hours in flight ([`MAX_IN_FLIGHT`]).
    #[error(
        "backoff cap ({}) is over 12h, the longest SQS keeps a message in flight",
        humantime::format_duration(*.cap)
    )]
    CapOverTwelveHours {
        /// The policy's cap.
        cap: Duration,
    },
}

/// The visibility timeout to set for a retry.
///
/// `delay` is [`Backoff::delay`] or an explicit retry-after from the
/// handler. SQS takes whole seconds (0 to 43,200,
/// <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ChangeMessageVisibility.html>),
/// and 0 makes the message visible at once, so the delay is rounded *up*:
/// the next attempt never comes sooner than asked. Rounding down would
/// turn every full-jitter draw under a second into an immediate redelivery
/// that spends one of the queue's `maxReceiveCount` receives for nothing
/// (the chaos suite lost jobs to the DLQ that way during an outage). The
/// result is then clamped so that `in_flight_so_far + timeout` stays within
/// [`MAX_IN_FLIGHT`] minus [`IN_FLIGHT_SAFETY_MARGIN`], in whole seconds
/// rounded down (saturating at zero rather than going negative).
///
/// `in_flight_so_far` is the time since the receive that returned the
/// receipt handle; when it can only be estimated, overestimate it.
/// (Examples: the `visibility_timeout_examples` unit test.)
pub(crate) fn visibility_timeout(delay: Duration, in_flight_so_far: Duration) -> Duration {
    let room = MAX_IN_FLIGHT
        .saturating_sub(IN_FLIGHT_SAFETY_MARGIN)
        .saturating_sub(in_flight_so_far);
    let asked = delay
        .as_secs()
        .saturating_add(u64::from(delay.subsec_nanos() > 0));
    Duration::from_secs(asked.min(room.as_secs()))
}

/// Room kept below a queue's retention when idemq decides whether a retry
/// can still happen: the time from a message turning visible to its next
/// receive (Lambda's event source mapping may batch for up to 5 minutes,
/// <https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html>)
/// and the skew between SQS's clock (`SentTimestamp`) and this host's.
pub const RETENTION_SAFETY_MARGIN: Duration = Duration::from_secs(5 * 60);

/// Whole seconds, for messages: sub-second parts of an age only add noise.
fn secs(d: Duration) -> humantime::FormattedDuration {
    humantime::format_duration(Duration::from_secs(d.as_secs()))
}

/// A retry whose next attempt could come after SQS has deleted the message.
///
/// SQS deletes a message once it is older than the queue's
/// `MessageRetentionPeriod`, in flight or not, and never dead-letters it
/// then ("If you leave a message in the queue for longer than the queue's
/// configured retention period, Amazon SQS automatically deletes the
/// message",
/// <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_DeleteMessage.html>).
/// Its age counts from its enqueue time in *this* queue: a message moved
/// back from a DLQ by a redrive task is a new message with a new enqueue
/// time and full retention, and so is one that `idemq dlq redrive` sends
/// again
/// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-configure-dead-letter-queue-redrive.html>).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "retrying would outlive the queue's retention: the message is {age} old ({age_s} s) and its \
     next attempt could come {delay} ({delay_s} s) from now, past the queue's retention of \
     {retention} ({retention_s} s) less a safety margin of {margin} ({margin_s} s); SQS would \
     delete it unprocessed and never dead-letter it, so idemq dead-letters it now",
    age = secs(*age),
    age_s = age.as_secs(),
    delay = secs(*delay),
    delay_s = delay.as_secs(),
    retention = secs(*retention),
    retention_s = retention.as_secs(),
    margin = secs(*margin),
    margin_s = margin.as_secs(),
)]
pub(crate) struct OutlivesRetention {
    /// Time since the message was sent to the queue (`SentTimestamp`).
    pub age: Duration,
    /// The longest the retry could wait before its next attempt.
    pub delay: Duration,
    /// The queue's `MessageRetentionPeriod`.
    pub retention: Duration,
    pub margin: Duration,
}

/// Checks that a retry's next attempt comes while SQS still keeps the
/// message: `age + delay <= retention - margin`.
///
/// `delay` is the longest the retry can wait (the backoff's ceiling, or the
/// handler's retry-after, after [`visibility_timeout`]'s clamp); `margin`
/// covers what happens between the message turning visible and its next
/// attempt being over, e.g. [`RETENTION_SAFETY_MARGIN`] plus the queue's
/// visibility timeout.
pub(crate) fn check_retry_within_retention(
    age: Duration,
    delay: Duration,
    retention: Duration,
    margin: Duration,
) -> Result<(), OutlivesRetention> {
    // Added rather than subtracted: a margin over the retention never
    // underflows, it just refuses every retry.
    if age.saturating_add(delay).saturating_add(margin) > retention {
        return Err(OutlivesRetention {
            age,
            delay,
            retention,
            margin,
        });
    }
    Ok(())
}

/// The longest a failing message can spend on the source queue before
/// SQS's redrive moves it to the DLQ, if every receive fails and each
/// happens as soon as the message is visible:
///
/// `Σ_{n=1..maxReceiveCount} min(visibility_timeout + ceiling(n), 12 h)`
///
/// Receive `n` keeps the message in flight for at most the visibility
/// timeout while the job runs (a longer run makes it visible anyway, and
/// Lambda's function timeout must not exceed it) and then for the retry's
/// backoff, at most [`Backoff::ceiling`]`(n)`, the whole clamped to SQS's 12
/// hours in flight. The last receive's delay counts too: SQS moves the
/// message to the DLQ on the receive *after* the maxReceiveCount-th.
/// Not counted: time spent waiting in a backlog, a handler's retry-after
/// above the cap, and a queue's delivery delay.
///
/// ```
/// use std::time::Duration;
/// use idemq::backoff::{Backoff, worst_case_time_to_redrive};
///
/// // SQS's default maxReceiveCount 6, 30 s visibility, idemq's default
/// // backoff: 6 × 30 s + (2 + 4 + 8 + 16 + 32 + 64) s.
/// let t = worst_case_time_to_redrive(&Backoff::DEFAULT, 6, Duration::from_secs(30));
/// assert_eq!(t, Duration::from_secs(180 + 126));
/// ```
pub fn worst_case_time_to_redrive(
    backoff: &Backoff,
    max_receive_count: u32,
    visibility_timeout: Duration,
) -> Duration {
    let per_receive = |n: u32| {
        visibility_timeout
            .saturating_add(backoff.ceiling(n))
            .min(MAX_IN_FLIGHT)
    };
    let mut total = Duration::ZERO;
    for n in 1..=max_receive_count {
        let this = per_receive(n);
        if backoff.ceiling(n) == backoff.ceiling(n.saturating_add(1)) {
            // The ceiling stopped growing (at the cap, or a zero base): every
            // later receive costs the same, so multiply instead of looping up
            // to u32::MAX times.
            let rest = max_receive_count - n + 1;
            return total.saturating_add(this.saturating_mul(rest));
        }
        total = total.saturating_add(this);
    }
    total
}

/// A queue whose retention cannot hold every retry its redrive policy
/// allows: a job failing for that long would be deleted by SQS instead of
/// reaching the DLQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "maxReceiveCount {max_receive_count} receives, each up to the visibility timeout {visibility} \
     plus a backoff of up to min({cap}, {base} * 2^(n-1)) (12 h at most in flight), add up to \
     {worst} ({worst_s} s) before SQS's redrive moves a failing message to the DLQ: more than the \
     queue's retention of {retention} ({retention_s} s) less a safety margin of {margin}, and SQS \
     deletes a message when its retention runs out, in flight or not, without dead-lettering it. \
     idemq dead-letters a message itself when its next retry could come too late, but that job \
     gets fewer attempts than maxReceiveCount; lower maxReceiveCount or IDEMQ_BACKOFF_CAP, or \
     raise the queue's MessageRetentionPeriod",
    visibility = secs(*visibility_timeout),
    cap = humantime::format_duration(*cap),
    base = humantime::format_duration(*base),
    worst = secs(*worst_case),
    worst_s = worst_case.as_secs(),
    retention = secs(*retention),
    retention_s = retention.as_secs(),
    margin = secs(*margin),
)]
pub struct RetriesOutliveRetention {
    /// The queue's `RedrivePolicy.maxReceiveCount`.
    pub max_receive_count: u32,
    /// The queue's visibility timeout.
    pub visibility_timeout: Duration,
    /// The backoff's base ([`Backoff::base`]).
    pub base: Duration,
    /// The backoff's cap ([`Backoff::cap`]).
    pub cap: Duration,
    /// [`worst_case_time_to_redrive`].
    pub worst_case: Duration,
    /// The queue's `MessageRetentionPeriod`.
    pub retention: Duration,
    /// Room kept below the retention ([`RETENTION_SAFETY_MARGIN`]).
    pub margin: Duration,
}

/// Checks that [`worst_case_time_to_redrive`] plus
/// [`RETENTION_SAFETY_MARGIN`] fits in the queue's retention, and returns
/// the worst case when it does. Run at start-up and by `idemq init`.
///
/// ```
/// use std::time::Duration;
/// use idemq::backoff::{Backoff, check_retries_fit_retention};
///
/// let day = Duration::from_secs(24 * 3600);
/// let v = Duration::from_secs(30);
/// assert!(check_retries_fit_retention(&Backoff::DEFAULT, 6, v, 4 * day).is_ok());
/// // 1000 receives of up to 15 min 30 s each: about 10.8 days.
/// let err = check_retries_fit_retention(&Backoff::DEFAULT, 1000, v, 4 * day).unwrap_err();
/// assert!(err.worst_case > 10 * day);
/// ```
pub fn check_retries_fit_retention(
    backoff: &Backoff,
    max_receive_count: u32,
    visibility_timeout: Duration,
    retention: Duration,
) -> Result<Duration, RetriesOutliveRetention> {
    let worst_case = worst_case_time_to_redrive(backoff, max_receive_count, visibility_timeout);
    if worst_case.saturating_add(RETENTION_SAFETY_MARGIN) > retention {
        return Err(RetriesOutliveRetention {
            max_receive_count,
            visibility_timeout,
            base: backoff.base(),
            cap: backoff.cap(),
            worst_case,
            retention,
            margin: RETENTION_SAFETY_MARGIN,
        });
    }
    Ok(worst_case)
}

#[cfg(test)]
mod tests;
