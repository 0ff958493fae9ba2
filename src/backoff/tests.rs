//! Unit tests of the backoff (src/backoff.rs): by table and by property.

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
    // Room left: the delay, rounded up (never sooner than asked).
    assert_eq!(visibility_timeout(ms(7_001), secs(0)), secs(8));
    assert_eq!(visibility_timeout(ms(999), secs(100)), secs(1));
    assert_eq!(visibility_timeout(ms(0), secs(100)), secs(0));
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

const DAY: Duration = secs(24 * 3600);

#[test]
fn retry_within_retention_table() {
    let h = |n: u64| secs(n * 3600);
    let m = |n: u64| secs(n * 60);
    // (age, longest delay, retention, margin, retry allowed)
    let table = [
        (secs(0), secs(0), secs(60), secs(0), true),
        (secs(0), secs(2), 4 * DAY, m(5) + secs(30), true),
        // Old but the delay is short: still fits.
        (4 * DAY - h(1), m(15), 4 * DAY, m(5) + secs(30), true),
        // Old and the delay reaches past retention less the margin.
        (4 * DAY - h(1), h(1), 4 * DAY, m(5), false),
        (4 * DAY - m(10), m(15), 4 * DAY, m(5), false),
        // Young, but the handler asked for 12 h on a 1-day queue at 13 h.
        (h(13), h(12), DAY, m(5), false),
        (h(11), h(12), DAY, m(5), true),
        // Exactly at the limit is allowed; a nanosecond past is not.
        (h(20), h(3) + m(55), DAY, m(5), true),
        (
            h(20),
            h(3) + m(55) + Duration::from_nanos(1),
            DAY,
            m(5),
            false,
        ),
        // A margin over the whole retention refuses every retry.
        (secs(0), secs(0), secs(60), m(5), false),
        // Saturates instead of overflowing.
        (Duration::MAX, Duration::MAX, DAY, Duration::MAX, false),
    ];
    for (age, delay, retention, margin, ok) in table {
        let got = check_retry_within_retention(age, delay, retention, margin);
        assert_eq!(
            got.is_ok(),
            ok,
            "age {age:?} delay {delay:?} retention {retention:?} margin {margin:?}"
        );
        if let Err(e) = got {
            assert_eq!(
                e,
                OutlivesRetention {
                    age,
                    delay,
                    retention,
                    margin
                }
            );
        }
    }
}

#[test]
fn outlives_retention_names_the_numbers() {
    let e =
        check_retry_within_retention(4 * DAY - secs(600) + ms(400), secs(900), 4 * DAY, secs(330))
            .unwrap_err()
            .to_string();
    for want in [
        "3days 23h 50m old (345000 s)",
        "15m (900 s) from now",
        "retention of 4days (345600 s)",
        "safety margin of 5m 30s (330 s)",
        "dead-letters it now",
    ] {
        assert!(e.contains(want), "{want:?} not in {e:?}");
    }
}

#[test]
fn worst_case_time_to_redrive_table() {
    let v = secs(30);
    let d = Backoff::DEFAULT;
    // (policy, maxReceiveCount, visibility, want)
    let table = [
        (d, 0, v, secs(0)),
        (d, 1, v, secs(30 + 2)),
        (d, 6, v, secs(6 * 30 + 126)),
        // Ceilings 2..512 s, then 900 s (1024 s capped).
        (d, 10, v, secs(10 * 30 + 1022 + 900)),
        (d, 1000, v, secs(1000 * 30 + 1022 + 991 * 900)),
        (d, 6, secs(0), secs(126)),
        // Each receive is clamped to 12 h in flight.
        (
            Backoff::new().with_base(secs(3600)).with_cap(secs(3600)),
            3,
            secs(12 * 3600),
            secs(3 * 12 * 3600),
        ),
        (
            Backoff::new().with_base(secs(3600)).with_cap(MAX_IN_FLIGHT),
            3,
            secs(11 * 3600),
            secs(12 * 3600 + 12 * 3600 + 12 * 3600),
        ),
    ];
    for (b, count, vis, want) in table {
        assert_eq!(
            worst_case_time_to_redrive(&b, count, vis),
            want,
            "{b:?} x {count}, visibility {vis:?}"
        );
    }
    // Huge counts and a zero base finish at once and saturate.
    let t = worst_case_time_to_redrive(&d, u32::MAX, v);
    assert_eq!(t, secs(1022 + 930 * (u64::from(u32::MAX) - 9) + 30 * 9));
    let zero = Backoff::new().with_base(Duration::ZERO);
    assert_eq!(worst_case_time_to_redrive(&zero, u32::MAX, v), v * u32::MAX);
}

#[test]
fn retries_fit_retention_table() {
    let v = secs(30);
    let d = Backoff::DEFAULT;
    // (maxReceiveCount, visibility, retention, fits)
    let table = [
        (6, v, 4 * DAY, true),
        (6, v, secs(60), false), // 306 s + 5 min margin > 60 s
        (6, v, secs(306 + 300), true),
        (6, v, secs(306 + 299), false),
        (100, v, 4 * DAY, true),   // ~1.1 days
        (1000, v, 4 * DAY, false), // ~10.7 days
        (1000, v, 14 * DAY, true),
        (400, v, DAY, false),
    ];
    for (count, vis, retention, fits) in table {
        let got = check_retries_fit_retention(&d, count, vis, retention);
        assert_eq!(
            got.is_ok(),
            fits,
            "{count} x {vis:?} in {retention:?}: {got:?}"
        );
        let worst = worst_case_time_to_redrive(&d, count, vis);
        match got {
            Ok(w) => assert_eq!(w, worst),
            Err(e) => {
                assert_eq!(e.worst_case, worst);
                assert_eq!(e.retention, retention);
                assert_eq!(e.margin, RETENTION_SAFETY_MARGIN);
            }
        }
    }
    let e = check_retries_fit_retention(&d, 1000, v, 4 * DAY)
        .unwrap_err()
        .to_string();
    for want in [
        "maxReceiveCount 1000",
        "visibility timeout 30s",
        "min(15m, 2s * 2^(n-1))",
        "(922922 s)",
        "retention of 4days (345600 s)",
        "safety margin of 5m",
        "lower maxReceiveCount or IDEMQ_BACKOFF_CAP",
    ] {
        assert!(e.contains(want), "{want:?} not in {e:?}");
    }
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
        prop_assert!(t < d + secs(1));
        if f <= LIMIT {
            prop_assert!(t + f <= LIMIT, "{:?} + {:?} > 12 h - 5 s", t, f);
        } else {
            prop_assert_eq!(t, Duration::ZERO);
        }
        // Not clamped when there is room: a timeout that always returned
        // zero would pass the bounds above but fail here.
        if d + f + secs(1) <= LIMIT {
            prop_assert_eq!(t, secs(d.as_secs() + u64::from(d.subsec_nanos() > 0)));
            prop_assert!(t >= d, "sooner than asked: {:?} < {:?}", t, d);
        } else {
            prop_assert!(f + t + secs(1) > LIMIT, "clamped more than needed");
        }
    }
}
