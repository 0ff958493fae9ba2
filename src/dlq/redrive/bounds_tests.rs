//! Unit tests at the edges of what an operator may pass: extreme rates,
//! source-queue attributes that name no source, letters with no error.

use super::send::source_named;
use super::*;
use crate::dlq::peek::Context;

/// `--rate 1e-300` made `Duration::from_secs_f64` panic on infinity.
#[test]
fn a_rate_is_a_usable_pace_or_refused() {
    for bad in [1e-300, 0.0, -1.0, f64::NAN, f64::INFINITY, 1.0 / 86_401.0] {
        let err = Rate::per_second(bad).unwrap_err();
        assert!(err.to_string().starts_with("--rate "), "{err}");
    }
    assert!(
        Rate::per_second(1e-300)
            .unwrap_err()
            .to_string()
            .starts_with("--rate 1e-300: ")
    );
    let slowest = Rate::per_second(Rate::MIN_PER_SECOND).unwrap();
    assert_eq!(slowest.interval(1).as_secs(), 86_400);
    assert!(slowest.interval(10) < Duration::from_secs(11 * 86_400));
    let fast = Rate::per_second(f64::MAX).unwrap();
    assert_eq!(fast.interval(10), Duration::ZERO);
    assert_eq!(
        Rate::per_second(400.0).unwrap().interval(10),
        Duration::from_millis(25)
    );
}

#[test]
fn a_source_queue_attribute_must_name_a_real_source() {
    let sources = vec![
        "http://localhost/000000000000/orders".to_string(),
        "http://localhost/000000000000/payments".to_string(),
    ];
    assert_eq!(
        source_named(&sources, "payments"),
        Some("http://localhost/000000000000/payments")
    );
    assert_eq!(source_named(&sources, "admin-commands"), None);
    assert_eq!(source_named(&sources, "000000000000"), None);
}

#[test]
fn letters_without_an_error_cannot_be_judged_by_error_contains() {
    let mut c = Context {
        job_id: None,
        message_id: "m".into(),
        attempts: None,
        last_error: None,
        error_chain: vec![],
        failed_at: None,
        source_queue: None,
        deploy: None,
        idemq_version: None,
        backtrace: None,
        payload_bytes: 0,
        failure_record: false,
    };
    let f = Filter {
        error_contains: Some("outage".into()),
        ..Filter::default()
    };
    assert!(!f.matches(&c) && !f.can_judge(&c));
    assert!(Filter::default().can_judge(&c));
    c.last_error = Some("other".into());
    assert!(!f.matches(&c) && f.can_judge(&c));
}
