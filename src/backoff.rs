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
//! and [`visibility_timeout`] keeps the total under SQS's 12-hour limit.
//!
//! ```
//! use std::time::Duration;
//! use idemq::backoff::{Backoff, visibility_timeout};
//!
//! let backoff = Backoff::new().validate().unwrap();
//! // Third receive: the ceiling is 2 s * 2^2 = 8 s.
//! let delay = backoff.delay(3, &mut rand::rng());
//! assert!(delay <= Duration::from_secs(8));
//! let timeout = visibility_timeout(delay, Duration::from_secs(40));
//! assert_eq!(timeout.subsec_nanos(), 0); // SQS takes whole seconds
//! ```

use std::time::Duration;

use rand::{Rng, RngExt};

/// SQS limits a message's visibility to 12 h from the receive that returned
/// its receipt handle; a `ChangeMessageVisibility` past that is rejected.
pub const MAX_IN_FLIGHT: Duration = Duration::from_secs(12 * 3600);

/// Room kept below [`MAX_IN_FLIGHT`]: the caller's "in flight so far" is
/// measured on its own clock, and the request takes time to reach SQS.
pub const IN_FLIGHT_SAFETY_MARGIN: Duration = Duration::from_secs(5);

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

    pub fn base(&self) -> Duration {
        self.base
    }

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
    #[error("backoff base must be greater than zero")]
    ZeroBase,
    #[error(
        "backoff cap ({}) is below its base ({})",
        humantime::format_duration(*.cap),
        humantime::format_duration(*.base)
    )]
    CapBelowBase { base: Duration, cap: Duration },
    #[error(
        "backoff cap ({}) is over 12h, the longest SQS keeps a message in flight",
        humantime::format_duration(*.cap)
    )]
    CapOverTwelveHours { cap: Duration },
}

/// The visibility timeout to set for a retry.
///
/// `delay` is [`Backoff::delay`] or an explicit retry-after from the
/// handler. It is clamped so that `in_flight_so_far + timeout` stays within
/// [`MAX_IN_FLIGHT`] minus [`IN_FLIGHT_SAFETY_MARGIN`] (saturating at zero
/// rather than going negative), then rounded *down* to whole seconds, since
/// SQS takes integer seconds and rounding up could cross the limit.
///
/// `in_flight_so_far` is the time since the receive that returned the
/// receipt handle; when it can only be estimated, overestimate it.
///
/// ```
/// use std::time::Duration;
/// use idemq::backoff::visibility_timeout;
///
/// let h = |n: u64| Duration::from_secs(n * 3600);
/// assert_eq!(visibility_timeout(Duration::from_millis(7_900), h(0)), Duration::from_secs(7));
/// // 11 h already in flight: only 1 h - 5 s of room is left.
/// assert_eq!(visibility_timeout(h(3), h(11)), Duration::from_secs(3600 - 5));
/// assert_eq!(visibility_timeout(h(3), h(12)), Duration::ZERO);
/// ```
pub fn visibility_timeout(delay: Duration, in_flight_so_far: Duration) -> Duration {
    let room = MAX_IN_FLIGHT
        .saturating_sub(IN_FLIGHT_SAFETY_MARGIN)
        .saturating_sub(in_flight_so_far);
    Duration::from_secs(delay.min(room).as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    const fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    const fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// The latest total in flight a timeout may reach.
    const LIMIT: Duration = secs(12 * 3600 - 5);

    #[test]
    fn default_is_two_seconds_to_fifteen_minutes() {
        assert_eq!(Backoff::DEFAULT.base(), secs(2));
        assert_eq!(Backoff::DEFAULT.cap(), secs(900));
        assert_eq!(Backoff::new(), Backoff::DEFAULT);
        assert_eq!(Backoff::default(), Backoff::DEFAULT);
        assert_eq!(Backoff::DEFAULT.validate(), Ok(Backoff::DEFAULT));
    }

    #[test]
    fn ceiling_table_with_defaults() {
        let b = Backoff::DEFAULT;
        let table = [
            (0, secs(2)), // absent receive count: treated as the first
            (1, secs(2)),
            (2, secs(4)),
            (3, secs(8)),
            (4, secs(16)),
            (5, secs(32)),
            (9, secs(512)),
            (10, secs(900)), // 2 s * 512 = 1024 s > cap
            (11, secs(900)),
            (12, secs(900)),
            (64, secs(900)),
            (128, secs(900)),
            (129, secs(900)), // past the shift width of a u128
            (u32::MAX, secs(900)),
        ];
        for (count, want) in table {
            assert_eq!(b.ceiling(count), want, "receive count {count}");
        }
    }

    #[test]
    fn ceiling_table_with_custom_base_and_cap() {
        let b = Backoff::new().with_base(ms(100)).with_cap(secs(3600));
        let table = [
            (0, ms(100)),
            (1, ms(100)),
            (2, ms(200)),
            (3, ms(400)),
            (4, ms(800)),
            (10, ms(51_200)),
            (16, ms(3_276_800)),
            (17, secs(3600)), // 6553.6 s, capped
            (64, secs(3600)),
            (u32::MAX, secs(3600)),
        ];
        for (count, want) in table {
            assert_eq!(b.ceiling(count), want, "receive count {count}");
        }

        let flat = Backoff::new().with_base(secs(30)).with_cap(secs(30));
        for count in [0, 1, 2, 40, u32::MAX] {
            assert_eq!(flat.ceiling(count), secs(30), "receive count {count}");
        }
    }

    #[test]
    fn unvalidated_extremes_saturate_instead_of_panicking() {
        let huge = Backoff::new()
            .with_base(Duration::MAX)
            .with_cap(Duration::MAX);
        assert_eq!(huge.ceiling(u32::MAX), Duration::MAX);
        assert_eq!(huge.ceiling(1), Duration::MAX);
        let mut rng = StdRng::seed_from_u64(7);
        // Cap beyond u64 nanoseconds: the draw is clamped, not wrapped.
        let d = huge.delay(u32::MAX, &mut rng);
        assert!(d <= Duration::from_nanos(u64::MAX));

        let zero = Backoff::new().with_base(Duration::ZERO);
        assert_eq!(zero.ceiling(u32::MAX), Duration::ZERO);
        assert_eq!(zero.delay(5, &mut rng), Duration::ZERO);

        // Cap below base: the cap still wins.
        let inverted = Backoff::new().with_base(secs(10)).with_cap(secs(3));
        assert_eq!(inverted.ceiling(1), secs(3));
    }

    #[test]
    fn validate_rejects_each_bad_policy() {
        assert_eq!(
            Backoff::new().with_base(Duration::ZERO).validate(),
            Err(InvalidBackoff::ZeroBase)
        );
        assert_eq!(
            Backoff::new()
                .with_base(secs(10))
                .with_cap(secs(9))
                .validate(),
            Err(InvalidBackoff::CapBelowBase {
                base: secs(10),
                cap: secs(9)
            })
        );
        let too_long = MAX_IN_FLIGHT + Duration::from_nanos(1);
        assert_eq!(
            Backoff::new().with_cap(too_long).validate(),
            Err(InvalidBackoff::CapOverTwelveHours { cap: too_long })
        );
        // Boundaries are allowed.
        let edge = Backoff::new()
            .with_base(MAX_IN_FLIGHT)
            .with_cap(MAX_IN_FLIGHT);
        assert_eq!(edge.validate(), Ok(edge));
        let tiny = Backoff::new()
            .with_base(Duration::from_nanos(1))
            .with_cap(Duration::from_nanos(1));
        assert_eq!(tiny.validate(), Ok(tiny));
    }

    #[test]
    fn validation_errors_name_the_durations() {
        let below = InvalidBackoff::CapBelowBase {
            base: secs(10),
            cap: secs(9),
        };
        assert_eq!(
            below.to_string(),
            "backoff cap (9s) is below its base (10s)"
        );
        let over = InvalidBackoff::CapOverTwelveHours {
            cap: secs(13 * 3600),
        };
        assert!(over.to_string().contains("(13h)"), "{over}");
        assert!(InvalidBackoff::ZeroBase.to_string().contains("zero"));
    }

    #[test]
    fn jitter_spreads_over_the_whole_window() {
        // Receive count 4 with defaults: ceiling 16 s. A constant, a
        // "half jitter" or a capped-at-ceiling implementation all fail here.
        let b = Backoff::DEFAULT;
        assert_eq!(b.ceiling(4), secs(16));
        let mut rng = StdRng::seed_from_u64(0x1de9);
        let draws: Vec<f64> = (0..10_000)
            .map(|_| b.delay(4, &mut rng).as_secs_f64())
            .collect();
        let min = draws.iter().copied().fold(f64::INFINITY, f64::min);
        let max = draws.iter().copied().fold(0.0, f64::max);
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        assert!(min < 1.0, "min {min}");
        assert!(max > 15.0 && max <= 16.0, "max {max}");
        assert!((mean - 8.0).abs() < 0.5, "mean {mean}");

        // Every 1-second bucket gets its share (625 expected, σ ≈ 24).
        let mut buckets = [0u32; 16];
        for d in &draws {
            buckets[(*d as usize).min(15)] += 1;
        }
        for (i, n) in buckets.iter().enumerate() {
            assert!((475..=775).contains(n), "bucket {i}s: {n} draws");
        }
    }

    #[test]
    fn delay_comes_from_the_given_rng() {
        let b = Backoff::DEFAULT;
        let draw = |seed| b.delay(6, &mut StdRng::seed_from_u64(seed));
        assert_eq!(draw(1), draw(1), "same seed, same delay");
        let distinct: std::collections::HashSet<_> = (0..20).map(draw).collect();
        assert!(
            distinct.len() > 15,
            "seeds barely change the delay: {distinct:?}"
        );
    }

    #[test]
    fn visibility_timeout_examples() {
        // Room left: the delay, rounded down.
        assert_eq!(visibility_timeout(ms(7_999), secs(0)), secs(7));
        assert_eq!(visibility_timeout(ms(999), secs(100)), secs(0));
        assert_eq!(visibility_timeout(secs(900), secs(30)), secs(900));
        // Exactly at the limit.
        assert_eq!(visibility_timeout(LIMIT, Duration::ZERO), LIMIT);
        assert_eq!(visibility_timeout(secs(50_000), Duration::ZERO), LIMIT);
        // Clamped, then rounded down: 12 h - 5 s - 11.5 h = 1795 s.
        assert_eq!(
            visibility_timeout(secs(3600), ms(11 * 3_600_000 + 1_800_000)),
            secs(1795)
        );
        assert_eq!(visibility_timeout(secs(3600), LIMIT - ms(1_500)), secs(1));
        // No room: zero, never negative.
        assert_eq!(visibility_timeout(secs(60), LIMIT), Duration::ZERO);
        assert_eq!(
            visibility_timeout(secs(60), secs(13 * 3600)),
            Duration::ZERO
        );
        assert_eq!(
            visibility_timeout(Duration::MAX, Duration::MAX),
            Duration::ZERO
        );
    }

    /// A valid policy: base 1 ms..10 min, cap base..12 h.
    fn policy() -> impl Strategy<Value = Backoff> {
        (1u64..=600_000)
            .prop_flat_map(|base| (Just(base), base..=12 * 3_600_000))
            .prop_map(|(base, cap)| Backoff::new().with_base(ms(base)).with_cap(ms(cap)))
    }

    proptest! {
        #[test]
        fn delay_within_ceiling_within_cap(
            b in policy(),
            count in any::<u32>(),
            seed in any::<u64>(),
        ) {
            prop_assert_eq!(b.validate(), Ok(b));
            let ceiling = b.ceiling(count);
            let delay = b.delay(count, &mut StdRng::seed_from_u64(seed));
            prop_assert!(delay <= ceiling, "{:?} > {:?}", delay, ceiling);
            prop_assert!(ceiling <= b.cap());
            prop_assert!(ceiling >= b.base());
        }

        #[test]
        fn ceiling_doubles_until_the_cap(b in policy(), count in 1u32..200) {
            let now = b.ceiling(count);
            let next = b.ceiling(count + 1);
            prop_assert_eq!(next, (now * 2).min(b.cap()));
        }

        #[test]
        fn same_seed_later_receive_is_never_more_than_its_ceiling(
            b in policy(),
            count in 1u32..64,
            seed in any::<u64>(),
        ) {
            // A fixed seed through growing counts: every delay sits under its
            // own ceiling, and the ceilings never shrink.
            let mut rng = StdRng::seed_from_u64(seed);
            let mut last_ceiling = Duration::ZERO;
            for n in count..count + 8 {
                let ceiling = b.ceiling(n);
                prop_assert!(ceiling >= last_ceiling);
                prop_assert!(b.delay(n, &mut rng) <= ceiling);
                last_ceiling = ceiling;
            }
        }

        #[test]
        fn visibility_timeout_stays_under_twelve_hours(
            delay_ms in 0u64..=2 * 12 * 3_600_000,
            in_flight_ms in 0u64..=12 * 3_600_000,
        ) {
            let (d, f) = (ms(delay_ms), ms(in_flight_ms));
            let t = visibility_timeout(d, f);
            prop_assert_eq!(t.subsec_nanos(), 0, "not whole seconds: {:?}", t);
            prop_assert!(t <= d);
            if f <= LIMIT {
                prop_assert!(t + f <= LIMIT, "{:?} + {:?} > 12 h - 5 s", t, f);
            } else {
                prop_assert_eq!(t, Duration::ZERO);
            }
            // Not clamped when there is room: a timeout that always returned
            // zero would pass the bounds above but fail here.
            if d + f <= LIMIT {
                prop_assert_eq!(t, secs(d.as_secs()));
            } else {
                prop_assert!(f + t + secs(1) > LIMIT, "clamped more than needed");
            }
        }
    }
}
